#include "log.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "htab.h"

/* Rate limit: a peer can make the daemon repeat a line (a refused
 * connection, a denied request, a dropped agent) as fast as it can connect,
 * and a journal flooded with millions of lines hides everything else. Each
 * message "site", known by its format string, may print LOG_BURST lines at
 * once and LOG_PER_S per second after that; the rest are counted and said
 * in one "N similar messages suppressed" line, at most one per second per
 * site. */
#define LOG_SITES 128
#define LOG_BURST 20
#define LOG_PER_S 10
#define LOG_INTERVAL_NS (1000000000ull / LOG_PER_S)
#define LOG_REPORT_NS 1000000000ull

struct log_site {
	uint64_t key;               /* hash of the format; 0 = free slot */
	uint64_t tat_ns;            /* when the bucket is full again (GCRA) */
	uint64_t suppressed;
	uint64_t reported_ns;       /* last summary */
	enum log_level lvl;
	bool cut;                   /* what is only the format's beginning */
	char what[80];              /* the format, for the summary */
};

static enum log_level log_max = LOG_LVL_INFO;
static struct log_site log_sites[LOG_SITES];
static struct log_site log_overflow;  /* every site once the table is full */
static unsigned log_nsites;

void log_set_level(enum log_level max)
{
	log_max = max;
}

enum log_level log_get_level(void)
{
	return log_max;
}

int log_level_parse(const char *s)
{
	static const struct { const char *name; enum log_level lvl; } names[] = {
		{ "err", LOG_LVL_ERR }, { "error", LOG_LVL_ERR },
		{ "warning", LOG_LVL_WARNING }, { "warn", LOG_LVL_WARNING },
		{ "notice", LOG_LVL_NOTICE }, { "info", LOG_LVL_INFO },
		{ "debug", LOG_LVL_DEBUG },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i].name) == 0)
			return names[i].lvl;
	return -EINVAL;
}

static struct log_site *site_of(const char *fmt, enum log_level lvl)
{
	/* By content, not address: libbpf's messages all come through one
	 * buffer, and two identical formats are similar messages anyway. */
	uint64_t key = htab_mix64(htab_fnv1a_str(HTAB_FNV_SEED, fmt) ^ (uint64_t)lvl) | 1;
	size_t i = key & (LOG_SITES - 1);

	for (unsigned probe = 0; probe < LOG_SITES; probe++, i = (i + 1) & (LOG_SITES - 1)) {
		struct log_site *s = &log_sites[i];

		if (s->key == key)
			return s;
		if (s->key == 0) {
			/* Half full at most, so probe runs stay short. */
			if (log_nsites >= LOG_SITES / 2)
				break;
			log_nsites++;
			s->key = key;
			s->lvl = lvl;
			s->cut = (size_t)snprintf(s->what, sizeof(s->what), "%s", fmt) >= sizeof(s->what);
			return s;
		}
	}
	if (!log_overflow.key) {
		log_overflow.key = 1;
		log_overflow.lvl = LOG_LVL_WARNING;
		snprintf(log_overflow.what, sizeof(log_overflow.what), "(various messages)");
	}
	return &log_overflow;
}

static bool site_admit(struct log_site *s, uint64_t now)
{
	if (s->tat_ns > now + (LOG_BURST - 1) * LOG_INTERVAL_NS)
		return false;
	s->tat_ns = (s->tat_ns > now ? s->tat_ns : now) + LOG_INTERVAL_NS;
	return true;
}

static void site_report(struct log_site *s, uint64_t now)
{
	static const char audit[] = "audit: ";
	const char *what = s->what;
	bool is_audit = strncmp(what, audit, sizeof(audit) - 1) == 0;
	size_t n;

	/* An audit line's summary is an audit line too. */
	if (is_audit)
		what += sizeof(audit) - 1;
	n = strcspn(what, "\n");
	fprintf(stderr, "<%d>%s%llu similar messages suppressed (\"%.*s%s\")\n", (int)s->lvl,
		is_audit ? audit : "", (unsigned long long)s->suppressed, (int)n, what,
		s->cut || what[n] ? "..." : "");
	s->suppressed = 0;
	s->reported_ns = now;
}

void log_flush_suppressed(void)
{
	uint64_t now = clock_mono_ns();

	for (size_t i = 0; i < LOG_SITES; i++)
		if (log_sites[i].suppressed && now - log_sites[i].reported_ns >= LOG_REPORT_NS)
			site_report(&log_sites[i], now);
	if (log_overflow.suppressed && now - log_overflow.reported_ns >= LOG_REPORT_NS)
		site_report(&log_overflow, now);
}

void log_vmsg(enum log_level lvl, const char *fmt, va_list ap)
{
	char small[2048], *text = small, *line, *save = NULL;
	struct log_site *site;
	uint64_t now;
	va_list ap2;
	int n;

	if (lvl > log_max)
		return;
	now = clock_mono_ns();
	site = site_of(fmt, lvl);
	if (!site_admit(site, now)) {
		site->suppressed++;
		return;
	}
	if (site->suppressed && now - site->reported_ns >= LOG_REPORT_NS)
		site_report(site, now);
	va_copy(ap2, ap);
	n = vsnprintf(small, sizeof(small), fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return;
	/* Long messages (libbpf's verifier log) are kept whole. */
	if ((size_t)n >= sizeof(small)) {
		text = malloc((size_t)n + 1);
		if (!text)
			text = small;
		else
			vsnprintf(text, (size_t)n + 1, fmt, ap);
	}
	/* One record per line so journald keeps the priority on each. */
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		fprintf(stderr, "<%d>%s\n", (int)lvl, line);
	if (text != small)
		free(text);
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(lvl, fmt, ap);
	va_end(ap);
}

