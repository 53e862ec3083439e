/* The runner every Check suite here ends with: runs the suite, returns the
 * process exit code (0 when every test passed). */
#ifndef JPROF_CHECK_MAIN_H
#define JPROF_CHECK_MAIN_H

#include <check.h>

static inline int jprof_check_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

#endif
