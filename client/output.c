#include "output.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "jprof_formats.h"

/* Help text columns, as in every command's --help. */
#define OUTPUT_HELP_INDENT 25
#define OUTPUT_HELP_WIDTH 79

/* The temporary output file, removed by output_abort() from a signal
 * handler on a second Ctrl-C. */
static char output_tmp_path[PATH_MAX];
static volatile sig_atomic_t output_tmp_active;

const char *output_format_for_path(const char *path)
{
	int id = jprof_format_for_path(path);

	return jprof_format_info(id < 0 ? JPROF_FMT_COLLAPSED : (enum jprof_format)id)->name;
}

const char *output_choose_format(const char *format, const char *path)
{
	if (format)
		return format;
	if (path)
		return output_format_for_path(path);
	/* A person at a terminal wants the summary, a pipe the folded stacks
	 * that flame-graph tools read. */
	return jprof_format_info(isatty(STDOUT_FILENO) ? JPROF_FMT_TEXT : JPROF_FMT_COLLAPSED)->name;
}

/* Prints text from column OUTPUT_HELP_INDENT on, wrapped at spaces. */
static void output_help_wrap(const char *text)
{
	size_t col = OUTPUT_HELP_INDENT, n;

	while (*text) {
		n = strcspn(text, " ");
		if (col > OUTPUT_HELP_INDENT && col + 1 + n > OUTPUT_HELP_WIDTH) {
			printf("\n%*s", OUTPUT_HELP_INDENT, "");
			col = OUTPUT_HELP_INDENT;
		} else if (col > OUTPUT_HELP_INDENT) {
			putchar(' ');
			col++;
		}
		fwrite(text, 1, n, stdout);
		col += n;
		text += n + strspn(text + n, " ");
	}
	putchar('\n');
}

void output_help_format(const char *default_rule)
{
	char text[1024];
	size_t off;
	const char *sep = "";

	off = (size_t)snprintf(text, sizeof(text), "%s; default ", jprof_format_names());
	if (default_rule) {
		snprintf(text + off, sizeof(text) - off, "%s", default_rule);
	} else {
		off += (size_t)snprintf(text + off, sizeof(text) - off, "from the FILE extension (");
		for (int i = 0; i < JPROF_FMT_COUNT && off < sizeof(text); i++) {
			const struct jprof_format_info *f = jprof_format_info((enum jprof_format)i);

			for (const char *const *e = f->extensions; e && *e && off < sizeof(text); e++) {
				off += (size_t)snprintf(text + off, sizeof(text) - off, "%s%s", sep, *e);
				sep = "/";
			}
			if (*sep)
				sep = ", ";
		}
		if (off < sizeof(text))
			snprintf(text + off, sizeof(text) - off,
				 "; others collapsed); without -o, text on a terminal and collapsed "
				 "otherwise; 'jprofctl formats' describes them");
	}
	printf("  -f, --format FMT       ");
	output_help_wrap(text);
}

static int output_write_all(int fd, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, data, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A temporary file next to path, then rename(), so a reader never sees half
 * a profile. */
static int output_write_file(const char *path, const char *data, size_t len)
{
	int fd = -1, r;

	r = snprintf(output_tmp_path, sizeof(output_tmp_path), "%s.tmp.%d", path, (int)getpid());
	if (r < 0 || (size_t)r >= sizeof(output_tmp_path)) {
		r = -ENAMETOOLONG;
		ctl_err("cannot write %s: %s", path, strerror(-r));
		goto out;
	}
	fd = open(output_tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0) {
		r = -errno;
		ctl_err("cannot create %s: %s", output_tmp_path, strerror(-r));
		goto out;
	}
	output_tmp_active = 1;
	r = output_write_all(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	fd = -1;
	if (r < 0) {
		ctl_err("cannot write %s: %s", output_tmp_path, strerror(-r));
		goto out;
	}
	if (rename(output_tmp_path, path) < 0) {
		r = -errno;
		ctl_err("cannot rename %s to %s: %s", output_tmp_path, path, strerror(-r));
		goto out;
	}
	output_tmp_active = 0;
	r = 0;
out:
	if (fd >= 0)
		close(fd);
	if (output_tmp_active) {
		unlink(output_tmp_path);
		output_tmp_active = 0;
	}
	return r;
}

/* An existing file that is not a regular one (a device such as /dev/null,
 * a FIFO, /dev/stdout): written in place, as a shell's > would. A rename
 * over it would replace it with a regular file. */
static int output_write_special(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY), r;

	if (fd < 0) {
		r = -errno;
		ctl_err("cannot open %s: %s", path, strerror(-r));
		return r;
	}
	r = output_write_all(fd, data, len);
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r < 0)
		ctl_err("cannot write %s: %s", path, strerror(-r));
	return r;
}

int output_write(const char *path, const char *data, size_t len)
{
	struct stat st;
	int r;

	if (path && stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
		return output_write_special(path, data, len);
	if (path)
		return output_write_file(path, data, len);
	r = output_write_all(STDOUT_FILENO, data, len);
	if (r < 0)
		ctl_err("writing the profile to stdout: %s", strerror(-r));
	return r;
}

void output_abort(void)
{
	if (output_tmp_active)
		unlink(output_tmp_path);
}

void output_progress(const char *target, int64_t elapsed_ms, int64_t duration_ms,
		     int64_t samples, bool stopping)
{
	char n[32];

	ctl_status_show("recording %s: %.1fs / %.1fs, %s samples%s", target,
			elapsed_ms < 0 ? 0.0 : (double)elapsed_ms / 1000.0,
			duration_ms < 0 ? 0.0 : (double)duration_ms / 1000.0,
			ctl_num(n, sizeof(n), samples), stopping ? " (stopping)" : "");
}
