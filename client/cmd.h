/* jprofctl's commands, one file each (cmd_<name>.c). Each takes its argv
 * (argv[0] is the command's name) and the socket path from the global
 * options, and returns the process exit code (ctl.h). */
#ifndef JPROF_CLIENT_CMD_H
#define JPROF_CLIENT_CMD_H

int cmd_status(int argc, char **argv, const char *socket_path);
int cmd_record(int argc, char **argv, const char *socket_path);
int cmd_profile(int argc, char **argv, const char *socket_path);
int cmd_formats(int argc, char **argv, const char *socket_path);

#endif
