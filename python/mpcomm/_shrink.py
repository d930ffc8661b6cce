"""torch.distributed's bookkeeping for a shrunk mpcomm group (mpcomm.torch.shrink): the new group takes the old
one's place in torch.distributed's registries, so that every torch.distributed call (group=..., src=..., get_rank)
works on it, and the default group can be replaced by it.

Replacing the default group renumbers the global ranks, so every other group of the process is dropped (as
torch.distributed.shrink_group does on 2.x): the program makes the groups it needs again from the new world.
"""

import torch.distributed as _dist
import torch.distributed.distributed_c10d as _c10d


def default_group():
    return _c10d._get_default_group()


def group_ranks(pg) -> list:
    """The global ranks of pg's members, in group rank order."""
    ranks = (_c10d._world.pg_group_ranks if hasattr(_c10d, "_world") else _c10d._pg_group_ranks)[pg]
    return [g for g, _ in sorted(ranks.items(), key=lambda kv: kv[1])]


def register_torch2(pg, is_default: bool, new_backend, kept: list):
    """2.x: torch's own shrink_group registration (its world's maps, names, tags and the C++ registry).

    `kept`: the members' ranks in pg, in their new order."""
    finalize = getattr(_c10d, "_finalize_shrunk_group", None)
    if finalize is None:
        raise RuntimeError("mpcomm.torch.shrink: this torch has no torch.distributed.shrink_group (PyTorch 2.10 or "
                           "later has it) to register the new group with")
    old = group_ranks(pg)
    info = {"process_group": pg, "is_default_group": is_default, "group_size": pg.size(),
            "current_rank": pg.rank(), "group_name": _c10d._get_process_group_name(pg),
            "pg_options_override": None}
    # torch filters the old group's global ranks by this set: global ranks, not group ranks.
    gone = {old[r] for r in range(len(old)) if r not in set(kept)}
    new_pg = finalize(info, gone, new_backend)
    if is_default:
        # torch keeps the survivors' old global ranks ({0: 0, 2: 1, 3: 2}); the new world numbers them from 0, as
        # get_rank() does, so that a later shrink or new_group names ranks the way get_rank() gives them.
        _c10d._world.pg_group_ranks[new_pg] = {i: i for i in range(new_pg.size())}
    return new_pg


def register_torch1(pg, is_default: bool, new_pg, kept: list):
    """1.13: the module's maps (_pg_map, _pg_names, _pg_group_ranks) and, for the default group, group.WORLD."""
    old = group_ranks(pg)
    backend, store = _c10d._pg_map[pg]
    name = f"{_c10d._pg_names[pg]}:shrunk"
    if is_default:
        _c10d._pg_map.clear()
        _c10d._pg_names.clear()
        _c10d._pg_group_ranks.clear()
        _c10d._update_default_pg(new_pg)
        ranks = {i: i for i in range(new_pg.size())}
    else:
        for registry in (_c10d._pg_map, _c10d._pg_names, _c10d._pg_group_ranks):
            registry.pop(pg, None)
        ranks = {old[r]: i for i, r in enumerate(kept)}
    _c10d._pg_map[new_pg] = (backend, store)
    _c10d._pg_names[new_pg] = name
    _c10d._pg_group_ranks[new_pg] = ranks
    return new_pg


def forget(pg, is_default: bool):
    """On a rank the shrink left out: the old group leaves the registries (the default: the whole world)."""
    _dist.destroy_process_group(None if is_default else pg)
