/* Logging to stderr with sd-daemon priority prefixes ("<3>..."), which
 * journald turns into priorities. One audit line per privileged action.
 *
 * Every message is rate-limited by its format string (a peer can trigger
 * many lines): 20 lines at once, then 10 per second; the rest are counted
 * and said as "N similar messages suppressed (\"format\")", when the site
 * prints again or at the next log_flush_suppressed(). */
#ifndef JPROF_LOG_H
#define JPROF_LOG_H

#include <stdarg.h>

enum log_level {
	LOG_LVL_ERR = 3,
	LOG_LVL_WARNING = 4,
	LOG_LVL_NOTICE = 5,
	LOG_LVL_INFO = 6,
	LOG_LVL_DEBUG = 7,
};

void log_set_level(enum log_level max);
enum log_level log_get_level(void);
/* Parses "err", "warning", "notice", "info", "debug"; -EINVAL otherwise. */
int log_level_parse(const char *s);
void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_vmsg(enum log_level lvl, const char *fmt, va_list ap);
/* Says how many lines each site suppressed, at most once a second per site
 * (the daemon calls it every second). */
void log_flush_suppressed(void);

#define log_err(...) log_msg(LOG_LVL_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_LVL_NOTICE, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)
/* Privileged actions and denials: always logged, prefixed "audit:". */
#define log_audit(fmt, ...) log_msg(LOG_LVL_NOTICE, "audit: " fmt, ##__VA_ARGS__)

#endif
