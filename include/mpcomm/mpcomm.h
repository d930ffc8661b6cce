// mpcomm/mpcomm.h — the whole public API.
#pragma once

#include "mpcomm/communicator.h"
#include "mpcomm/error.h"
#include "mpcomm/reproducible.h"
#include "mpcomm/store.h"
#include "mpcomm/trace.h"
#include "mpcomm/types.h"
