/* PLACEHOLDER: replaced by the JFR helper. */
#include "jfr.h"

#include <errno.h>

int jfr_render(const struct export_job *job, struct buf *out)
{
	return -ENOTSUP;
}
