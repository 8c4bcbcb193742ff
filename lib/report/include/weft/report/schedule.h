// The step simulator moved to the cost model (weft/cost/schedule.h): the analytic step time is its
// makespan. Reports draw its events; this header stays for the report code that includes it.
#pragma once

#include "weft/cost/schedule.h"
