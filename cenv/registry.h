/* The one list of environments. Adding an env: write cenv/envs/<name>.h, include it here, and add
 * &<name>_spec to CENV_REGISTRY (see BUILD.md). Order here is the order `jaxlab envs` shows. */
#ifndef CENV_REGISTRY_H
#define CENV_REGISTRY_H

#include "envs/cartpole.h"
#include "envs/lure.h"
#include "envs/memory.h"
#include "envs/multicue.h"
#include "envs/pendulum.h"
#include "envs/spot.h"
#include "envs/target.h"

#define CENV_REGISTRY_H

#include "envs/cartpole.h"
#include "envs/memory.h"
#include "envs/pendulum.h"
#include "envs/lure.h"
#include "envs/multicue.h"
#include "envs/spot.h"
#include "envs/target.h"

#define CENV_REGISTRY \
    {&cartpole_spec, &pendulum_spec, &memory_spec, &target_spec, &multicue_spec, &spot_spec, &lure_spec}

#endif
