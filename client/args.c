#include "args.h"

#include <errno.h>
#include <string.h>

#include "jprof_proto.h"

int args_parse_time_us(const char *s, uint64_t bare_unit_us, uint64_t *out)
{
	static const struct {
		const char *name;
		uint64_t us;
	} units[] = {
		{ "us", 1 }, { "ms", 1000 }, { "s", 1000000 }, { "m", 60000000 },
		{ "h", 3600000000ULL },
	};
	uint64_t whole = 0, frac = 0, scale = 1, unit_us = 0, total, part;
	const char *p = s;
	int r = -EINVAL;

	if (*p < '0' || *p > '9')
		goto out;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (__builtin_mul_overflow(whole, 10, &whole) ||
		    __builtin_add_overflow(whole, (uint64_t)(*p - '0'), &whole)) {
			r = -ERANGE;
			goto out;
		}
	}
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			goto out;
		for (; *p >= '0' && *p <= '9'; p++) {
			/* Beyond nanoseconds of an hour nothing is exact anyway. */
			if (scale >= 1000000000000ULL)
				goto out;
			frac = frac * 10 + (uint64_t)(*p - '0');
			scale *= 10;
		}
	}
	if (*p == '\0') {
		unit_us = bare_unit_us;
	} else {
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
			if (strcmp(p, units[i].name) == 0)
				unit_us = units[i].us;
	}
	if (unit_us == 0)
		goto out;
	if (__builtin_mul_overflow(frac, unit_us, &part) || part % scale != 0)
		goto out;
	if (__builtin_mul_overflow(whole, unit_us, &total) ||
	    __builtin_add_overflow(total, part / scale, &total)) {
		r = -ERANGE;
		goto out;
	}
	*out = total;
	r = 0;
out:
	return r;
}

/* Whole milliseconds in [min_ms, max_ms]; a bare number means seconds. */
static int args_parse_ms(const char *s, uint64_t min_ms, uint64_t max_ms, uint64_t *ms)
{
	uint64_t us;
	int r = args_parse_time_us(s, 1000000, &us);

	if (r < 0)
		return r;
	if (us % 1000 != 0)
		return -EINVAL;
	if (us / 1000 < min_ms || us / 1000 > max_ms)
		return -ERANGE;
	*ms = us / 1000;
	return 0;
}

int args_parse_duration_ms(const char *s, uint64_t *ms)
{
	return args_parse_ms(s, 1, JPROF_DURATION_MS_MAX, ms);
}

/* A time with its unit, within [min, max] microseconds. */
static int parse_us_in(const char *s, uint64_t min, uint64_t max, uint64_t *us)
{
	int r = args_parse_time_us(s, 0, us);

	if (r < 0)
		return r;
	return *us < min || *us > max ? -ERANGE : 0;
}

int args_parse_interval_us(const char *s, uint64_t *us)
{
	return parse_us_in(s, JPROF_INTERVAL_US_MIN, JPROF_INTERVAL_US_MAX, us);
}

int args_parse_threshold_us(const char *s, uint64_t *us)
{
	return parse_us_in(s, JPROF_THRESHOLD_US_MIN, JPROF_THRESHOLD_US_MAX, us);
}

int args_parse_alloc_bytes(const char *s, uint64_t *bytes)
{
	uint64_t v = 0, mult = 1;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	switch (*p) {
	case '\0':
		break;
	case 'k': case 'K':
		mult = 1ull << 10;
		p++;
		break;
	case 'm': case 'M':
		mult = 1ull << 20;
		p++;
		break;
	case 'g': case 'G':
		mult = 1ull << 30;
		p++;
		break;
	default:
		return -EINVAL;
	}
	if (*p)
		return -EINVAL;
	if (v > JPROF_ALLOC_BYTES_MAX / mult)
		return -ERANGE;
	v *= mult;
	if (v < JPROF_ALLOC_BYTES_MIN)
		return -ERANGE;
	*bytes = v;
	return 0;
}

int args_parse_events(const char *s, unsigned *mask, char *why, size_t len)
{
	int ids[JPROF_EVENT_COUNT];
	size_t n;
	int r = jprof_event_list_parse(s, ids, &n, why, len);

	*mask = 0;
	for (size_t i = 0; r == 0 && i < n; i++)
		*mask |= 1u << ids[i];
	return r;
}

int args_parse_ago_ms(const char *s, int64_t *ms)
{
	uint64_t v;
	int r = args_parse_ms(s, 0, (uint64_t)JPROF_RANGE_MS_MAX, &v);

	if (r == 0)
		*ms = (int64_t)v;
	return r;
}

int args_parse_pid(const char *s, int32_t *pid)
{
	uint64_t v = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > INT32_MAX)
			return -ERANGE;
	}
	if (*s || v == 0)
		return -EINVAL;
	*pid = (int32_t)v;
	return 0;
}
