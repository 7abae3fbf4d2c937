"""Discrete-event simulation of one agent tree's budget ledger on DynamoDB (R-BUDGET, docs/scale.md), three
designs on the same workload and seed:
- today: every spend is one TransactWriteItems over root + self (DynamoLedger.charge_retrievals);
- sharded: the root's limit split over N shard items; a spend transacts its home shard + self, falls back
  to any shard with budget left, and is refused only when a read of every shard proves the tree short;
- escrow: a sub-agent takes a slice of the root's budget into its own item (one transaction, folded into
  the spend that needs it) and spends against it with one plain conditional write; unused escrow goes back
  when the sub-agent completes, or is reclaimed once its lease has expired (a crashed Lambda).

What is modelled, per item: a token bucket of write capacity (1,000 WCU/s, a transactional write costs 2
WCU, a plain conditional write 1); a lock held while a transaction commits — a transaction or a plain
write touching a locked item is cancelled with TransactionConflict; conditions evaluated atomically, a
refusal charges nothing; retries with the ledger adapter's backoff and attempt cap. Seeded, stdlib only.

    python bench/scale_sim.py                  # 10 s of a 64 x 8 tree aiming at > 10,000 spends/s
    python bench/scale_sim.py --json           # the same figures as JSON
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import statistics
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass, field, replace

MAX_ATTEMPTS = 64  # as DynamoLedger: then StateUnavailable
TODAY, SHARDED, ESCROW = "today", "sharded", "escrow"
DESIGNS = (TODAY, SHARDED, ESCROW)


@dataclass(frozen=True)
class Model:
    """DynamoDB as the simulation sees it; every delay is scaled by uniform(1 - jitter, 1 + jitter)."""

    item_wcu_per_second: float = 1000.0
    item_burst_wcu: float = 100.0  # 0.1 s of unused capacity, no more
    tx_wcu_per_item: int = 2
    write_wcu: int = 1
    one_way_ms: float = 4.0  # client <-> DynamoDB, each way
    tx_commit_ms: float = 2.0  # items stay locked this long (prepare .. commit)
    write_ms: float = 0.5
    jitter: float = 0.5


@dataclass(frozen=True)
class Workload:
    """One root invocation with `sub_agents` children, each making `workers_per_sub` concurrent tool calls
    (closed loop). Without limits, workers start spends for `seconds`; with one, they spend until refused."""

    design: str = TODAY
    sub_agents: int = 64
    workers_per_sub: int = 8
    think_ms: float = 20.0  # between one worker's spends
    seconds: float = 10.0
    root_limit: int | None = None
    sub_limit: int | None = None
    max_units: int = 1  # a spend takes uniform(1, max_units) units
    shards: int = 64
    escrow_slice: int = 64  # units a sub-agent takes from the root at a time (fewer when less is left)
    lease_seconds: float = 0.5  # escrow untouched this long may be reclaimed by anyone
    crashed_subs: int = 0  # sub-agents whose Lambdas die after `crash_after` spends, holding their escrow
    crash_after: int = 3
    seed: int = 7


# --- DynamoDB ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Write:
    """One item's conditional update inside a request: applied only if `check` holds for every item."""

    key: str
    check: Callable[[dict[str, int]], bool]
    apply: Callable[[dict[str, int]], None]


@dataclass(frozen=True)
class Transact:
    writes: list[Write]


@dataclass(frozen=True)
class Update:
    """One plain conditional UpdateItem (1 WCU, no commit lock)."""

    write: Write


@dataclass(frozen=True)
class BatchGet:
    """Strongly consistent reads of several items: each sees its last commit; no snapshot across items."""

    keys: list[str]


@dataclass(frozen=True)
class Sleep:
    seconds: float


Op = Transact | Update | BatchGet | Sleep


@dataclass(frozen=True)
class Result:
    kind: str  # ok | conflict | throttled | condition
    failed: frozenset[str] = frozenset()  # keys whose condition failed (CancellationReasons)
    items: dict[str, dict[str, int]] = field(default_factory=dict)  # read, or ALL_OLD of a failed write


@dataclass
class Item:
    values: dict[str, int]
    tokens: float
    refilled_at: float = 0.0
    locked_until: float = -1.0


@dataclass
class Counters:
    requests: int = 0
    conflicts: int = 0
    throttles: int = 0
    retries: int = 0
    fallbacks: int = 0  # sharded: spends that read every shard because their home shard was short
    acquired: int = 0  # escrow: units moved from the root into sub-agents' items
    returned: int = 0  # escrow: units given back (on completion or by lease expiry)
    reclaims: int = 0  # escrow: returns of an expired lease by someone else
    wcu: int = 0


class Table:
    """Items by key, each with its own write capacity and commit lock."""

    def __init__(self, model: Model, counters: Counters) -> None:
        self.model = model
        self.items: dict[str, Item] = {}
        self.counters = counters

    def put(self, key: str, **values: int) -> None:
        self.items[key] = Item(dict(values), tokens=self.model.item_burst_wcu)

    def _has_capacity(self, item: Item, now: float, wcu: int) -> bool:
        rate, burst = self.model.item_wcu_per_second, self.model.item_burst_wcu
        item.tokens = min(burst, item.tokens + (now - item.refilled_at) * rate)
        item.refilled_at = now
        return item.tokens >= wcu

    def serve(
        self, op: Transact | Update | BatchGet, now: float, commit: float, write: float
    ) -> tuple[Result, float]:
        """The result of `op` arriving at `now`, and how long DynamoDB spends on it."""
        self.counters.requests += 1
        if isinstance(op, BatchGet):
            return Result("ok", items={k: dict(self.items[k].values) for k in op.keys}), write
        single = isinstance(op, Update)
        writes = [op.write] if isinstance(op, Update) else op.writes
        items = [self.items[w.key] for w in writes]
        if any(item.locked_until > now for item in items):
            self.counters.conflicts += 1
            return Result("conflict"), 0.0
        wcu = self.model.write_wcu if single else self.model.tx_wcu_per_item
        if not all(self._has_capacity(item, now, wcu) for item in items):
            self.counters.throttles += 1
            return Result("throttled"), 0.0
        for item in items:  # a failed condition still consumes the write capacity
            item.tokens -= wcu
        self.counters.wcu += wcu * len(items)
        failed = frozenset(w.key for w, item in zip(writes, items, strict=True) if not w.check(item.values))
        if failed:
            old = {w.key: dict(item.values) for w, item in zip(writes, items, strict=True)}
            return Result("condition", failed, old), write
        for w, item in zip(writes, items, strict=True):
            w.apply(item.values)
        if single:
            return Result("ok"), write
        for item in items:
            item.locked_until = now + commit
        return Result("ok"), commit


# --- the event loop --------------------------------------------------------------------------------------
Process = Generator[Op, Result | None, None]


class Simulation:
    """Processes are generators yielding requests; each resumes with its result after the round trip."""

    def __init__(self, model: Model, seed: int) -> None:
        self.model = model
        self.rng = random.Random(seed)
        self.counters = Counters()
        self.table = Table(model, self.counters)
        self.now = 0.0
        self._queue: list[tuple[float, int, Process, Result | None, Op | None]] = []
        self._order = itertools.count()

    def delay(self, ms: float) -> float:
        j = self.model.jitter
        return ms / 1000 * self.rng.uniform(1 - j, 1 + j)

    def spawn(self, process: Process, at: float) -> None:
        heapq.heappush(self._queue, (at, next(self._order), process, None, None))

    def run(self) -> None:
        while self._queue:
            self.now, _, process, value, arriving = heapq.heappop(self._queue)
            if arriving is not None:  # a request reaching DynamoDB: serve it, answer after the way back
                assert not isinstance(arriving, Sleep)
                result, busy = self.table.serve(
                    arriving, self.now, self.delay(self.model.tx_commit_ms), self.delay(self.model.write_ms)
                )
                back = self.now + busy + self.delay(self.model.one_way_ms)
                heapq.heappush(self._queue, (back, next(self._order), process, result, None))
                continue
            try:
                op = process.send(value)
            except StopIteration:
                continue
            if isinstance(op, Sleep):
                heapq.heappush(self._queue, (self.now + op.seconds, next(self._order), process, None, None))
            else:
                arrive = self.now + self.delay(self.model.one_way_ms)
                heapq.heappush(self._queue, (arrive, next(self._order), process, None, op))


# --- the three ledgers -------------------------------------------------------------------------------------
def _charge(n: int, budget: str) -> Write:
    """spent += n if spent + n <= budget (budget: the item's `limit` or its `share`)."""

    def check(v: dict[str, int]) -> bool:
        return v["spent"] + n <= v[budget]

    def apply(v: dict[str, int]) -> None:
        v["spent"] += n

    return Write("", check, apply)


def _on(key: str, write: Write) -> Write:
    return Write(key, write.check, write.apply)


def backoff(rng: random.Random, attempt: int) -> Sleep:
    """DynamoLedger._backoff: full jitter, 1 ms doubling, at most 50 ms."""
    return Sleep(rng.uniform(0, min(0.05, 0.001 * 2 ** min(attempt, 6))))


def shard_key(i: int) -> str:
    return f"root#{i}"


def spend_today(sim: Simulation, sub: str, n: int) -> Generator[Op, Result | None, str]:
    """One TransactWriteItems over the chain root..self, as DynamoLedger.charge_retrievals."""
    writes = [_on("root", _charge(n, "limit")), _on(sub, _charge(n, "limit"))]
    for attempt in range(MAX_ATTEMPTS):
        result = yield Transact(writes)
        assert result is not None
        if result.kind == "ok":
            return "ok"
        if result.kind == "condition":
            return "refused"
        sim.counters.retries += 1
        yield backoff(sim.rng, attempt)
    return "gave_up"


def spend_sharded(
    sim: Simulation, sub: str, home: int, shards: int, n: int
) -> Generator[Op, Result | None, str]:
    """Home shard + self in one transaction. If the shard is short: read every shard and take the n units
    from shards that have them, still in one transaction; if they hold fewer than n in total, refuse.
    Free budget only ever shrinks (shares never move), so a sum over non-atomic reads is an upper bound of
    the tree's free budget at the last read: a refusal is exact without a snapshot."""
    plan = {home: n}
    for attempt in range(MAX_ATTEMPTS):
        writes = [_on(shard_key(i), _charge(take, "share")) for i, take in plan.items()]
        result = yield Transact([*writes, _on(sub, _charge(n, "limit"))])
        assert result is not None
        if result.kind == "ok":
            return "ok"
        if result.kind == "condition":
            if sub in result.failed:  # the sub-agent's own limit: refused, as today
                return "refused"
            sim.counters.fallbacks += 1
            read = yield BatchGet([shard_key(i) for i in range(shards)])
            assert read is not None
            free = {
                i: read.items[shard_key(i)]["share"] - read.items[shard_key(i)]["spent"]
                for i in range(shards)
            }
            if sum(free.values()) < n:
                return "refused"
            plan = {}
            left = n
            for i in sorted((i for i in free if free[i] > 0), key=lambda i: (-free[i], sim.rng.random())):
                plan[i] = min(left, free[i])
                left -= plan[i]
                if not left:
                    break
            continue
        sim.counters.retries += 1
        yield backoff(sim.rng, attempt)
    return "gave_up"


def _escrow_charge(n: int, more: int, lease_until_ms: int) -> Write:
    """Take `more` units of escrow (0 = none) and spend n of it: spent + n <= escrow + more <= limit."""

    def check(v: dict[str, int]) -> bool:
        return v["spent"] + n <= v["escrow"] + more <= v["limit"]

    def apply(v: dict[str, int]) -> None:
        v["spent"] += n
        if more:
            v["escrow"] += more
            v["lease_ms"] = lease_until_ms

    return Write("", check, apply)


def _grant(more: int) -> Write:
    """The root gives `more` units away (negative: takes them back): granted + more <= limit."""

    def check(v: dict[str, int]) -> bool:
        return 0 <= v["granted"] + more <= v["limit"]

    def apply(v: dict[str, int]) -> None:
        v["granted"] += more

    return Write("root", check, apply)


def spend_escrow(
    sim: Simulation, sub: str, n: int, workload: Workload, subs: list[str]
) -> Generator[Op, Result | None, str]:
    """A plain conditional write against the sub-agent's own escrow; when short, one transaction takes a
    slice from the root and spends in the same commit. The root short: reclaim expired leases, or refuse."""
    more = short = 0
    for attempt in range(MAX_ATTEMPTS):
        lease_until_ms = round((sim.now + workload.lease_seconds) * 1000)
        charge = _on(sub, _escrow_charge(n, more, lease_until_ms))
        result = yield (Transact([_grant(more), charge]) if more else Update(charge))
        assert result is not None
        if result.kind == "ok":
            sim.counters.acquired += more
            return "ok"
        if result.kind != "condition":
            sim.counters.retries += 1
            yield backoff(sim.rng, attempt)
            continue
        if sub in result.failed:  # ALL_OLD of the sub-agent's item says why
            v = result.items[sub]
            if v["spent"] + n > v["limit"]:
                return "refused"  # its own limit, as today
            short = v["spent"] + n - v["escrow"]
            more = max(short, min(workload.escrow_slice, v["limit"] - v["escrow"]))
            continue
        free = result.items["root"]["limit"] - result.items["root"]["granted"]
        if short <= free < more:  # less is left than a slice: take what there is
            more = free
            continue
        if (yield from reclaim_expired(sim, subs)):
            continue
        return "refused"
    return "gave_up"


def return_escrow(
    sim: Simulation, sub: str, expired_by_ms: int | None = None
) -> Generator[Op, Result | None, int]:
    """Give a sub-agent's unused escrow back to the root: read it, then one transaction that holds only if
    nothing moved since (so a unit is returned at most once). With `expired_by_ms`, only an expired lease."""
    for attempt in range(MAX_ATTEMPTS):
        read = yield BatchGet([sub])
        assert read is not None
        seen = read.items[sub]
        unused = seen["escrow"] - seen["spent"]
        if unused == 0 or (expired_by_ms is not None and seen["lease_ms"] > expired_by_ms):
            return 0

        def unchanged(v: dict[str, int], seen: dict[str, int] = seen) -> bool:
            expired = expired_by_ms is None or v["lease_ms"] <= expired_by_ms
            return expired and v["escrow"] == seen["escrow"] and v["spent"] == seen["spent"]

        def close(v: dict[str, int]) -> None:
            v["escrow"] = v["spent"]

        result = yield Transact([_grant(-unused), Write(sub, unchanged, close)])
        assert result is not None
        if result.kind == "ok":
            sim.counters.returned += unused
            sim.counters.reclaims += expired_by_ms is not None
            return unused
        if result.kind != "condition":
            sim.counters.retries += 1
            yield backoff(sim.rng, attempt)
    return 0


def reclaim_expired(sim: Simulation, subs: list[str]) -> Generator[Op, Result | None, bool]:
    """Return the unused escrow of every sub-agent whose lease has expired (one Query of the tree's items)."""
    now_ms = round(sim.now * 1000)
    read = yield BatchGet(subs)
    assert read is not None
    expired = [
        s
        for s in subs
        if read.items[s]["escrow"] > read.items[s]["spent"] and read.items[s]["lease_ms"] <= now_ms
    ]
    got = 0
    for sub in expired:
        got += yield from return_escrow(sim, sub, expired_by_ms=now_ms)
    return got > 0


# --- one run -------------------------------------------------------------------------------------------
BIG = 10**12


@dataclass
class Report:
    design: str
    seconds: float
    spends: int
    spends_per_second: float
    p50_ms: float
    p99_ms: float
    refused: int
    premature: int  # refusals while the tree and the sub-agent still had the units (ground truth)
    gave_up: int
    requests: int
    retries: int
    conflicts: int
    throttles: int
    fallbacks: int
    acquired: int
    returned: int
    reclaims: int
    wcu_per_spend: float
    budget: int | None
    spent: int
    unspent: int
    overspend: int


def shares(limit: int, shards: int) -> list[int]:
    """The root limit split over the shards; the shares add up to the limit exactly."""
    return [limit // shards + (1 if i < limit % shards else 0) for i in range(shards)]


def simulate(workload: Workload, model: Model | None = None) -> Report:
    """Run one design to the end and check its books: nothing overspent, every charge on root and self."""
    model = model or Model()
    sim = Simulation(model, workload.seed)
    root_limit = BIG if workload.root_limit is None else workload.root_limit
    sub_limit = BIG if workload.sub_limit is None else workload.sub_limit
    design = workload.design
    if design == SHARDED:
        for i, share in enumerate(shares(root_limit, workload.shards)):
            sim.table.put(shard_key(i), share=share, spent=0)
    elif design == ESCROW:
        sim.table.put("root", limit=root_limit, granted=0)
    else:
        sim.table.put("root", limit=root_limit, spent=0)
    subs = [f"sub#{s}" for s in range(workload.sub_agents)]
    for sub in subs:
        sim.table.put(sub, limit=sub_limit, spent=0, escrow=0, lease_ms=0)
    crashed = set(subs[: workload.crashed_subs])
    running = dict.fromkeys(subs, workload.workers_per_sub)
    latencies: list[float] = []
    outcomes: dict[str, int] = {"ok": 0, "refused": 0, "gave_up": 0}
    premature = 0
    spent_by_callers = 0
    finite = workload.root_limit is not None or workload.sub_limit is not None

    def tree_spent() -> int:
        return sum(sim.table.items[sub].values["spent"] for sub in subs)

    def spend(s: int, n: int) -> Generator[Op, Result | None, str]:
        if design == TODAY:
            return (yield from spend_today(sim, subs[s], n))
        if design == SHARDED:
            return (yield from spend_sharded(sim, subs[s], s % workload.shards, workload.shards, n))
        return (yield from spend_escrow(sim, subs[s], n, workload, subs))

    def worker(s: int) -> Process:
        nonlocal premature, spent_by_callers
        rng = random.Random(sim.rng.random())
        sub = subs[s]
        spends = 0
        last_unit = False  # refused a larger spend: from now on ask for one unit, as chars are cut to fit
        while finite or sim.now < workload.seconds:
            if sub in crashed and spends >= workload.crash_after:
                return  # the Lambda dies: no completion, its escrow waits for its lease to expire
            n = 1 if last_unit else rng.randint(1, workload.max_units)
            started = sim.now
            outcome = yield from spend(s, n)
            outcomes[outcome] += 1
            if outcome == "ok":
                spends += 1
                if finite or sim.now <= workload.seconds:  # spends finishing after the window do not count
                    latencies.append(sim.now - started)
                spent_by_callers += n
            elif outcome == "refused":
                own = sim.table.items[sub].values
                premature += min(root_limit - tree_spent(), own["limit"] - own["spent"]) >= n
                if n > 1:
                    last_unit = True
                    continue
                break  # one unit refused: this caller's budget is exhausted
            elif finite:
                break  # StateUnavailable: the caller gives up
            yield Sleep(rng.expovariate(1000 / workload.think_ms))
        running[sub] -= 1
        if design == ESCROW and not running[sub]:  # the sub-agent's last call completes it
            yield from return_escrow(sim, sub)

    def sweeper() -> Process:
        """After every lease has run out: what the crashed sub-agents still hold goes back to the root."""
        yield from reclaim_expired(sim, subs)

    for s in range(workload.sub_agents):
        for _ in range(workload.workers_per_sub):
            sim.spawn(worker(s), at=sim.rng.uniform(0, workload.think_ms / 1000))
    sim.run()
    ended = sim.now
    if design == ESCROW:
        sim.spawn(sweeper(), at=sim.now + workload.lease_seconds + 0.001)
        sim.run()

    items = {k: item.values for k, item in sim.table.items.items()}
    spent = tree_spent()
    assert spent == spent_by_callers, "a charge landed that no caller saw succeed, or the reverse"
    overspend = max(0, spent - root_limit) + sum(max(0, items[s]["spent"] - sub_limit) for s in subs)
    if design == SHARDED:
        assert sum(v["share"] for k, v in items.items() if k.startswith("root#")) == root_limit
        assert sum(v["spent"] for k, v in items.items() if k.startswith("root#")) == spent
        overspend += sum(max(0, v["spent"] - v["share"]) for k, v in items.items() if k.startswith("root#"))
    elif design == ESCROW:  # every unit of escrow is spent or back at the root, each exactly once
        assert all(items[s]["escrow"] == items[s]["spent"] for s in subs), "escrow left behind"
        assert items["root"]["granted"] == spent
        assert sim.counters.acquired == spent + sim.counters.returned
        overspend += max(0, items["root"]["granted"] - root_limit)
    else:
        assert items["root"]["spent"] == spent
    elapsed = workload.seconds if not finite else ended
    ms = sorted(latencies) or [0.0]
    c = sim.counters
    return Report(
        design=design,
        seconds=round(elapsed, 3),
        spends=outcomes["ok"],
        spends_per_second=len(latencies) / elapsed if elapsed else 0.0,
        p50_ms=statistics.median(ms) * 1000,
        p99_ms=ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))] * 1000,
        refused=outcomes["refused"],
        premature=premature,
        gave_up=outcomes["gave_up"],
        requests=c.requests,
        retries=c.retries,
        conflicts=c.conflicts,
        throttles=c.throttles,
        fallbacks=c.fallbacks,
        acquired=c.acquired,
        returned=c.returned,
        reclaims=c.reclaims,
        wcu_per_spend=c.wcu / max(1, outcomes["ok"]),
        budget=workload.root_limit,
        spent=spent,
        unspent=root_limit - spent if workload.root_limit is not None else 0,
        overspend=overspend,
    )


def compare(workload: Workload, model: Model | None = None) -> dict[str, Report]:
    """Every design on the same workload and seed."""
    return {design: simulate(replace(workload, design=design), model) for design in DESIGNS}


def _row(label: str, r: Report) -> str:
    return (
        f"{label:<24} {r.spends_per_second:>9,.0f} {r.p50_ms:>7.1f} {r.p99_ms:>8.1f} {r.retries:>8,} "
        f"{r.conflicts:>9,} {r.throttles:>9,} {r.gave_up:>7,} {r.wcu_per_spend:>5.1f} "
        f"{r.spent:>9,} {r.refused:>7,} {r.premature:>9,} {r.overspend:>4}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sub-agents", type=int, default=64)
    parser.add_argument("--workers", type=int, default=8, help="concurrent tool calls per sub-agent")
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--budget", type=int, default=50_000, help="root limit of the exhaustion run")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    load = Workload(
        sub_agents=args.sub_agents,
        workers_per_sub=args.workers,
        seconds=args.seconds,
        shards=args.shards,
        seed=args.seed,
    )
    runs = compare(load)
    # Exhaustion: spends of 1-3 units until refused; some sub-agents stop on their own limit first, and two
    # crash holding escrow (the other designs hold nothing, so a crash costs them nothing).
    exhaust = replace(
        load,
        workers_per_sub=2,
        root_limit=args.budget,
        sub_limit=args.budget // 40,
        max_units=3,
        crashed_subs=2,
    )
    exhausted = compare(exhaust)
    for r in [*runs.values(), *exhausted.values()]:
        assert r.overspend == 0, f"{r.design} overspent by {r.overspend}"
    for r in exhausted.values():
        assert r.spent + r.unspent == args.budget and r.spent <= args.budget
    for design in (TODAY, SHARDED):  # exact: every refusal was due, and the whole budget got spent
        assert exhausted[design].premature == 0 and exhausted[design].spent == args.budget
    today = runs[TODAY].spends_per_second
    ratios = {design: r.spends_per_second / today for design, r in runs.items()}
    if args.json:
        print(
            json.dumps(
                {
                    "throughput": {d: asdict(r) for d, r in runs.items()},
                    "ratio_to_today": ratios,
                    "exhaustion": {d: asdict(r) for d, r in exhausted.items()},
                },
                indent=2,
            )
        )
        return
    print(
        f"one tree: root + {load.sub_agents} sub-agents x {load.workers_per_sub} concurrent calls, "
        f"think {load.think_ms:.0f} ms, {load.seconds:.0f} s simulated"
    )
    header = (
        f"{'design':<24} {'spends/s':>9} {'p50 ms':>7} {'p99 ms':>8} {'retries':>8} {'conflicts':>9} "
        f"{'throttles':>9} {'gave up':>7} {'WCU':>5} {'spent':>9} {'refused':>7} {'premature':>9} {'over':>4}"
    )
    labels = {
        TODAY: "today (root in every tx)",
        SHARDED: f"sharded ({load.shards} shards)",
        ESCROW: f"escrow (slice {load.escrow_slice})",
    }
    print(header)
    for design, r in runs.items():
        print(_row(labels[design], r))
    print("throughput vs today: " + ", ".join(f"{d} {ratio:.1f}x" for d, ratio in ratios.items()))
    print(
        f"\nexhaustion: root budget {args.budget:,}, sub-agent limit {exhaust.sub_limit:,}, "
        f"spends of 1-3 units until refused, {exhaust.crashed_subs} sub-agents crash holding escrow"
    )
    print(header)
    for design, r in exhausted.items():
        print(_row(labels[design], r))
    for r in exhausted.values():
        print(
            f"  {r.design}: spent {r.spent:,} + unspent {r.unspent:,} = {r.spent + r.unspent:,}; "
            f"{r.seconds:.1f} s simulated"
            + (f"; {r.fallbacks:,} fallback reads" if r.design == SHARDED else "")
            + (
                f"; escrow acquired {r.acquired:,} = spent + returned {r.returned:,} "
                f"({r.reclaims} reclaimed on lease expiry)"
                if r.design == ESCROW
                else ""
            )
        )


if __name__ == "__main__":
    main()
