"""What the resume gate and the checkpoint advice buy: a seeded model of one shared GPU pool.

    python tests/bench/sim_recovery.py                 # 5 seeds, 14 simulated days each, ~90 s
    python tests/bench/sim_recovery.py --seeds 1 --days 3

One pool of GPUs runs guaranteed jobs (never preempted; they arrive in bursts) and a backlog of
preemptible training jobs that fill what is left. A guaranteed job that does not fit preempts
preemptible ones. A preemption costs what the design names: the restart (pods start, the job loads
its checkpoint), the rollback (training since the last checkpoint is lost), and the thrash (a job
that comes back into a gap only to be preempted again pays both again). Six runs per seed, the
same arrivals in each:

    no gate      a preempted job is requeued at once, at its old place and priority (Kueue's default
                 BestEffortFIFO orders waiting jobs by priority, then creation time, which a
                 requeued job keeps)
    gate         trainguard's resume gate: it waits `--cooldown` after its preemption, at most
                 `--max-resuming` resumed jobs restart at once (until `--settle` after they train
                 again), and a job is never gated longer than `--max-gated`; jobs keep their priority.
                 As on a real cluster (tests/fleet/test_recovery.py), Kueue admits the resumed job
                 first and the gate holds its pods: a gated job holds its quota and may be preempted
                 while gated (`--gate-outside-queue`: the first model, where it held nothing)
    gate + resume priority   the same, and resumed jobs get a resume priority class above every
                 preemptible class (recovery.tiers.preemptible.resumePriorityClass)
  × declared     each job checkpoints at the interval its owner wrote (drawn from 10m, 30m, 1h, 2h)
    suggested    at the Young/Daly interval √(2C/λ) for its save time C, with λ the preemption rate
                 per job-hour measured in the seed's "no gate, declared" run (what a platform would
                 put in recovery.tiers.preemptible.preemptionsPerHour from its history)

Assumptions (the model's, stated so they can be argued with):
- Time advances in fixed steps of `--step` seconds; everything below is rounded to steps.
- A restart costs a fixed `--restart` seconds (scheduling, image, process start) plus loading the
  checkpoint: `--load` seconds with the shared storage to itself; k jobs loading at once share its
  bandwidth (each progresses at 1/k). So simultaneous resumes slow each other down.
- Saving a checkpoint of save time C stops training for C seconds (no asynchronous checkpointing);
  a preemption during a save loses that save. A preempted job loses everything since its last
  completed save; a job preempted before its first save since a restart loses all that training.
- Gated resumed jobs hold the GPUs Kueue admitted them with (see "gate"); a preemption while
  gated costs no rollback but counts as a preemption and, within 30 min of that admission, a
  thrash.
- Preemptible jobs carry one of three priority classes (drawn at random). As with Kueue's
  `withinClusterQueue: LowerPriority`, a waiting preemptible job that does not fit preempts running
  preemptible jobs of strictly lower priority; a guaranteed job preempts any. Victims: lowest
  priority first, then the most recently started. This is where "each restart preempts another"
  comes from. Fresh jobs are never gated.
- Guaranteed jobs: bursts arrive as a Poisson process (mean `--burst-every` hours); a burst brings
  1-4 jobs a few minutes apart (exponential, mean 8 min), of 8, 16 or 32 GPUs, running 20 min to
  3 h. Preemptible jobs: 8 or 16 GPUs, 6-30 h of training each, save time drawn from 30, 60, 120
  and 300 s; a finished job is replaced by a new one so the backlog stays at `--backlog`.
- Progress is counted in GPU-hours of training that was kept (not rolled back); guaranteed work is
  the same in every run and is reported apart.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field

HOUR = 3600.0
RESUME_BOOST = 10
THRASH_WINDOW = 1800.0  # a resumed job preempted again this soon after its restart has thrashed


@dataclass
class Params:
    pool: int = 96
    days: float = 14.0
    step: float = 30.0
    backlog: int = 10
    burst_every: float = 3.0  # hours between guaranteed bursts (mean)
    restart: float = 90.0
    load: float = 150.0
    cooldown: float = 600.0
    max_resuming: int = 2
    max_gated: float = 1800.0
    settle: float = 300.0
    thrash_window: float = THRASH_WINDOW
    # How Kueue and the gate meet: Kueue admits a resumed job (reserving its quota, preempting for
    # it as for any job) before its pods exist, and the gate holds the admitted pods. True: a gated
    # job holds its GPUs and may be preempted while gated. False: the first model's reading, where
    # a gated job waits outside the queue, holding nothing and preempting nobody.
    gate_holds_quota: bool = True


@dataclass
class GJob:
    gpus: int
    arrive: float
    duration: float
    start: float | None = None


@dataclass
class PJob:
    ident: int
    gpus: int
    work: float  # seconds of training needed
    save: float  # C
    declared: float  # declared checkpoint interval, seconds
    arrive: float
    level: int = 0  # the priority class its owner chose (0, 1 or 2)
    interval: float = 0.0
    state: str = "queued"  # queued | gated | restarting | running | done
    progress: float = 0.0
    checkpointed: float = 0.0
    since_save: float = 0.0
    saving_left: float = 0.0
    fixed_left: float = 0.0
    load_left: float = 0.0
    started: float = 0.0
    evicted_at: float | None = None
    resumed: bool = False  # came back after a preemption (resume priority, counts as resuming)
    trained_since: float | None = None  # when training started after the last restart


@dataclass
class Totals:
    progress: float = 0.0  # GPU-seconds of kept training
    rollback: float = 0.0
    restart: float = 0.0
    saving: float = 0.0
    idle: float = 0.0
    guaranteed: float = 0.0
    preemptions: int = 0
    thrash: int = 0  # preemptions of a resumed job within 30 min of its restart
    job_hours: float = 0.0  # preemptible job-hours on GPUs (for the measured λ)
    finished: int = 0
    gated_hours: float = 0.0  # job-hours spent behind the gate
    guaranteed_wait: float = 0.0  # hours guaranteed jobs waited for GPUs

    def row(self) -> dict[str, float]:
        h = HOUR
        return {
            "progress": self.progress / h,
            "rollback": self.rollback / h,
            "restart": self.restart / h,
            "saving": self.saving / h,
            "idle": self.idle / h,
            "preemptions": float(self.preemptions),
            "thrash": float(self.thrash),
            "finished": float(self.finished),
            "gated": self.gated_hours,
            "g_wait": self.guaranteed_wait,
        }


@dataclass
class Trace:
    guaranteed: list[GJob]
    preemptible: list[PJob]  # the first `backlog` are there at t=0; the rest replace finished ones
    seed: int = 0
    extra: list[PJob] = field(default_factory=list)


def make_trace(p: Params, seed: int) -> Trace:
    rng = random.Random(seed)
    horizon = p.days * 24 * HOUR
    gjobs: list[GJob] = []
    t = rng.expovariate(1 / (p.burst_every * HOUR))
    while t < horizon:
        at = t
        for _ in range(rng.randint(1, 4)):
            gjobs.append(GJob(rng.choice((8, 16, 32)), at, rng.uniform(20 * 60, 3 * HOUR)))
            at += rng.expovariate(1 / (8 * 60))
        t += rng.expovariate(1 / (p.burst_every * HOUR))
    gjobs.sort(key=lambda g: g.arrive)
    pjobs = [
        PJob(
            i,
            rng.choice((8, 16)),
            rng.uniform(6, 30) * HOUR,
            rng.choice((30.0, 60.0, 120.0, 300.0)),
            rng.choice((600.0, 1800.0, 3600.0, 7200.0)),
            0.0,
            rng.choice((0, 1, 2)),
        )
        for i in range(p.backlog * 20)
    ]
    return Trace(gjobs, pjobs, seed)


def young_daly(save: float, per_hour: float) -> float:
    return math.sqrt(2 * save / (per_hour / HOUR))


def simulate(
    p: Params, trace: Trace, *, gate: bool, suggested_rate: float | None, resume_priority: bool = False
) -> Totals:
    """One run. `suggested_rate`: λ per job-hour for the Young/Daly interval; None: declared intervals."""
    tot = Totals()
    dt = p.step
    horizon = p.days * 24 * HOUR
    pending = [PJob(**{**j.__dict__}) for j in trace.preemptible]
    for j in pending:
        j.interval = young_daly(j.save, suggested_rate) if suggested_rate else j.declared
    active: list[PJob] = pending[: p.backlog]
    supply = pending[p.backlog :]
    g_arrivals = [GJob(g.gpus, g.arrive, g.duration) for g in trace.guaranteed]
    g_queue: list[GJob] = []
    g_running: list[GJob] = []
    gi = 0
    t = 0.0
    while t < horizon:
        # Guaranteed jobs end, then arrive.
        g_running = [g for g in g_running if g.start is not None and t < g.start + g.duration]
        while gi < len(g_arrivals) and g_arrivals[gi].arrive <= t:
            g_queue.append(g_arrivals[gi])
            gi += 1
        on_gpus = [j for j in active if j.state in ("restarting", "running", "held")]
        used = sum(g.gpus for g in g_running) + sum(j.gpus for j in on_gpus)
        while g_queue:
            g = g_queue[0]
            free = p.pool - used
            if free < g.gpus:
                victims = sorted(on_gpus, key=lambda j: (priority(j, resume_priority), -j.started))
                freed, chosen = free, []
                for v in victims:
                    if freed >= g.gpus:
                        break
                    chosen.append(v)
                    freed += v.gpus
                if freed < g.gpus:
                    break  # waits for guaranteed jobs to end
                for v in chosen:
                    preempt(v, t, gate, tot, p)
                    on_gpus.remove(v)
                    used -= v.gpus
            g.start = t
            g_running.append(g)
            used += g.gpus
            g_queue.pop(0)
        tot.guaranteed_wait += len(g_queue) * dt / HOUR

        # Preemptible jobs start in Kueue's BestEffortFIFO order: priority first, then creation (a
        # requeued job keeps its creation time, so it goes back to its old place).
        resuming = sum(
            1
            for j in active
            if j.resumed
            and j.state in ("restarting", "running")
            and (j.trained_since is None or t - j.trained_since < p.settle)
            and t - j.started < p.max_gated
        )
        candidates = [j for j in active if j.state in ("queued", "gated")]
        candidates.sort(key=lambda j: (-priority(j, resume_priority), j.arrive, j.ident))
        for j in candidates:
            if j.state == "gated":
                assert j.evicted_at is not None
                waited = t - j.evicted_at
                if waited < p.max_gated and (waited < p.cooldown or resuming >= p.max_resuming):
                    continue
            if p.pool - used < j.gpus:
                # Kueue's withinClusterQueue: LowerPriority: a waiting job may preempt running
                # preemptible jobs of lower priority (lowest first, then the latest started).
                mine = priority(j, resume_priority)
                lower = sorted(
                    (v for v in on_gpus if priority(v, resume_priority) < mine),
                    key=lambda v: (priority(v, resume_priority), -v.started),
                )
                freed, chosen = p.pool - used, []
                for v in lower:
                    if freed >= j.gpus:
                        break
                    chosen.append(v)
                    freed += v.gpus
                if freed < j.gpus:
                    continue
                for v in chosen:
                    preempt(v, t, gate, tot, p)
                    on_gpus.remove(v)
                    used -= v.gpus
            if j.state == "gated":
                resuming += 1
            if gate and p.gate_holds_quota and j.resumed:
                j.state = "held"  # admitted: its quota is reserved, its pods wait behind the gate
                j.started = t
            else:
                start(j, t, p)
            on_gpus.append(j)
            used += j.gpus
        # The resume controller lifts the gates of admitted jobs (their GPUs are theirs already).
        for j in sorted(
            (j for j in active if j.state == "held"), key=lambda j: (-j.level, j.evicted_at or 0.0)
        ):
            assert j.evicted_at is not None
            held = t - j.started
            if held >= p.max_gated or (t - j.evicted_at >= p.cooldown and resuming < p.max_resuming):
                resuming += held < p.max_gated
                start(j, t, p)

        # Everyone advances one step.
        loading = sum(1 for j in active if j.state == "restarting" and j.fixed_left <= 0)
        for j in active:
            advance(j, t, dt, loading, tot)
        tot.idle += (p.pool - used) * dt
        tot.guaranteed += sum(g.gpus for g in g_running) * dt
        for j in active:
            if j.state == "done":
                tot.finished += 1
        active = [j for j in active if j.state != "done"]
        while len(active) < p.backlog and supply:
            nxt = supply.pop(0)
            nxt.arrive = t
            active.append(nxt)
        t += dt
    return tot


def priority(j: PJob, resume_priority: bool) -> int:
    """Its class's level; with a resume priority class, a resumed job is above every fresh one."""
    return j.level + (RESUME_BOOST if resume_priority and j.resumed else 0)


def start(j: PJob, t: float, p: Params) -> None:
    j.state = "restarting"
    j.started = t
    j.fixed_left = p.restart
    j.load_left = p.load if j.checkpointed > 0 else 0.0  # a fresh job has nothing to load
    j.trained_since = None


def preempt(j: PJob, t: float, gate: bool, tot: Totals, p: Params) -> None:
    tot.preemptions += 1
    if j.resumed and t - j.started < p.thrash_window:
        tot.thrash += 1
    tot.rollback += (j.progress - j.checkpointed) * j.gpus
    j.progress = j.checkpointed
    j.since_save = 0.0
    j.saving_left = 0.0
    j.evicted_at = t
    j.resumed = True
    # Kueue requeues it; where the gate holds admitted pods, it is gated once admitted again.
    j.state = "gated" if gate and not p.gate_holds_quota else "queued"


def advance(j: PJob, t: float, dt: float, loading: int, tot: Totals) -> None:
    if j.state in ("gated", "held"):
        tot.gated_hours += dt / HOUR
        return
    if j.state == "restarting":
        tot.restart += dt * j.gpus
        tot.job_hours += dt / HOUR
        if j.fixed_left > 0:
            j.fixed_left -= dt
        else:
            j.load_left -= dt / max(loading, 1)
        if j.fixed_left <= 0 and j.load_left <= 0:
            j.state = "running"
            j.trained_since = t + dt
        return
    if j.state != "running":
        return
    tot.job_hours += dt / HOUR
    if j.saving_left > 0:
        tot.saving += dt * j.gpus
        j.saving_left -= dt
        if j.saving_left <= 0:
            tot.progress += (j.progress - j.checkpointed) * j.gpus  # now safe from preemption
            j.checkpointed = j.progress
            j.since_save = 0.0
            if j.progress >= j.work:
                j.state = "done"
        return
    j.progress += dt
    j.since_save += dt
    if j.progress >= j.work or j.since_save >= j.interval:
        j.saving_left = j.save  # the last save before finishing, or a periodic one


def run(p: Params, seeds: list[int]) -> dict[str, list[dict[str, float]]]:
    rows: dict[str, list[dict[str, float]]] = {}
    for seed in seeds:
        trace = make_trace(p, seed)
        base = simulate(p, trace, gate=False, suggested_rate=None)
        rate = base.preemptions / base.job_hours if base.job_hours else 0.0
        runs = {
            "no gate, declared": base,
            "no gate, suggested": simulate(p, trace, gate=False, suggested_rate=rate),
            "gate, declared": simulate(p, trace, gate=True, suggested_rate=None),
            "gate, suggested": simulate(p, trace, gate=True, suggested_rate=rate),
            "gate + resume priority, declared": simulate(
                p, trace, gate=True, suggested_rate=None, resume_priority=True
            ),
            "gate + resume priority, suggested": simulate(
                p, trace, gate=True, suggested_rate=rate, resume_priority=True
            ),
        }
        for name, tot in runs.items():
            row = tot.row()
            row["lambda"] = rate
            rows.setdefault(name, []).append(row)
    return rows


COLUMNS = (
    ("progress", "progress GPU-h"),
    ("rollback", "rollback GPU-h"),
    ("restart", "restart GPU-h"),
    ("saving", "saving GPU-h"),
    ("idle", "idle GPU-h"),
    ("preemptions", "preemptions"),
    ("thrash", "re-preempted < 30 min"),
    ("finished", "jobs finished"),
    ("gated", "job-h gated"),
)


def table(rows: dict[str, list[dict[str, float]]]) -> str:
    head = "| run | " + " | ".join(c[1] for c in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    for name, per_seed in rows.items():
        cells = [f"{statistics.median(r[k] for r in per_seed):,.0f}" for k, _ in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds 1..N; the table shows medians over them")
    ap.add_argument("--days", type=float, default=Params.days)
    ap.add_argument("--pool", type=int, default=Params.pool)
    ap.add_argument("--step", type=float, default=Params.step)
    ap.add_argument("--cooldown", type=float, default=Params.cooldown)
    ap.add_argument("--max-resuming", type=int, default=Params.max_resuming)
    ap.add_argument("--burst-every", type=float, default=Params.burst_every)
    ap.add_argument(
        "--gate-outside-queue",
        action="store_true",
        help="the first model: a gated job holds no quota and cannot be preempted while gated",
    )
    args = ap.parse_args(argv)
    p = Params(
        pool=args.pool,
        days=args.days,
        step=args.step,
        cooldown=args.cooldown,
        max_resuming=args.max_resuming,
        burst_every=args.burst_every,
        gate_holds_quota=not args.gate_outside_queue,
    )
    began = time.perf_counter()
    rows = run(p, list(range(1, args.seeds + 1)))
    lam = statistics.median(r["lambda"] for r in rows["no gate, declared"])
    print(
        f"pool {p.pool} GPUs, {p.days:g} days x {args.seeds} seeds (medians), step {p.step:g} s; "
        f"gate: cooldown {p.cooldown:g} s, {p.max_resuming} resuming at once, settle {p.settle:g} s, "
        f"bound {p.max_gated:g} s; restart {p.restart:g} s + load {p.load:g} s shared; "
        f"measured lambda {lam:.3f} preemptions per job-hour"
    )
    print(table(rows))
    print(f"({time.perf_counter() - began:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
