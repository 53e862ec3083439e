#include "jprof_proto.h"
