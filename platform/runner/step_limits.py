"""How large one step of a run may be: the owner's caps on sequences and tokens per step
(runner.limits: settings PLATFORM_MAX_SEQUENCES_PER_STEP, PLATFORM_MAX_TOKENS_PER_STEP, a `UserLimits`
row overrides them) and the memory a worker has (settings.PLATFORM_WORKER_MEMORY_BYTES) against the
trainer's estimate of one step (trainers.loop.memory_estimate).

The figures are the trainer's own: sequences and tokens per step come from the batch plan
(`trainers.step.plan`: sequences = batch.prompts_per_step x grpo.num_generations; tokens = sequences x
(data.max_prompt_tokens + rollout.max_new_tokens or the task's budget)), the memory from the plan and
the model shape.

The cluster a run asks for counts too (`cluster_refusals`): cluster.hosts against
PLATFORM_MAX_HOSTS_PER_RUN and hosts x cluster.devices_per_host against PLATFORM_MAX_DEVICES_PER_RUN (a
local Ray starts one process per host on the worker).

Checked wherever a run goes on the queue (runner.services: launch, resume, retry; runner.forks: fork),
next to `check_queued_room`: `check_step_room` raises LaunchRefused(429) naming the fields, their
values, the limit and who can raise it; the transaction rolls back and nothing is queued. Checked
again by the worker when a run starts (runner.attempt: a config stored before the caps, or a limit
lowered since): the run fails with the same message. Saving an experiment is not checked (a draft);
the plan preview shows the figures, the owner's limits and whether a launch would be refused.
"""

from __future__ import annotations

import dataclasses

from django.conf import settings

from experiments import configs
from runner.limits import LaunchRefused, RunLimits, limits_for
from trainers.config import ExperimentConfig
from trainers.loop.memory_estimate import StepMemory, memory_refusal, step_memory
from trainers.step.plan import BatchPlan, make_plan

ADMIN_HINT = "an admin can raise your limit (admin: Run execution > User limits)"


def cap_refusal(what: str, product: str, value: int, limit: int, fields: str) -> str | None:
    """Why `value` (= `product`, spelled with the fields and their values) is over a per-user
    `limit`, naming the `fields` to lower, or None."""
    if value <= limit:
        return None
    return f"{what}: {product} = {value}, the limit is {limit}; lower {fields}, or {ADMIN_HINT}"


def sequences_refusal(plan: BatchPlan, limit: int) -> str | None:
    """Why a step of `plan` holds too many sequences for `limit`, or None."""
    return cap_refusal(
        "sequences per step",
        f"batch.prompts_per_step {plan.prompts_per_step} x grpo.num_generations {plan.num_generations}",
        plan.sequences_per_step,
        limit,
        "batch.prompts_per_step or grpo.num_generations",
    )


def tokens_refusal(plan: BatchPlan, limit: int) -> str | None:
    """Why a step of `plan` holds too many tokens for `limit`, or None."""
    return cap_refusal(
        "tokens per step",
        f"{plan.sequences_per_step} sequences x (data.max_prompt_tokens "
        f"{plan.prompt_token_budget} + rollout.max_new_tokens {plan.completion_token_budget})",
        plan.tokens_per_step,
        limit,
        "batch.prompts_per_step, grpo.num_generations, rollout.max_new_tokens or data.max_prompt_tokens",
    )


def cluster_refusals(config: ExperimentConfig, limits: RunLimits) -> tuple[str, ...]:
    """Why a run asks the cluster for more hosts, or hosts x devices, than `limits` allow (a local Ray
    starts one process per host on the worker itself), or ()."""
    hosts, per_host = config.cluster.hosts, config.cluster.devices_per_host
    found = [
        cap_refusal(
            "cluster.hosts",
            f"cluster.hosts {hosts}",
            hosts,
            limits.max_hosts_per_run,
            "cluster.hosts (PLATFORM_MAX_HOSTS_PER_RUN)",
        )
    ]
    devices = hosts * (per_host or 1)
    found.append(
        cap_refusal(
            "cluster devices",
            f"cluster.hosts {hosts} x cluster.devices_per_host {per_host or 1}"
            + ("" if per_host else " (empty: counted as 1)"),
            devices,
            limits.max_devices_per_run,
            "cluster.hosts or cluster.devices_per_host (PLATFORM_MAX_DEVICES_PER_RUN)",
        )
    )
    return tuple(r for r in found if r)


@dataclasses.dataclass(frozen=True)
class StepCheck:
    """A config's step figures against its owner's limits: `memory` is None when the model's shape
    cannot be read (the config check reports that)."""

    plan: BatchPlan
    memory: StepMemory | None
    limits: RunLimits
    worker_memory_bytes: int
    cluster: tuple[str, ...] = ()  # cluster_refusals: hosts and devices over the limits

    @property
    def step_refusals(self) -> tuple[str, ...]:
        found = (
            sequences_refusal(self.plan, self.limits.max_sequences_per_step),
            tokens_refusal(self.plan, self.limits.max_tokens_per_step),
            None
            if self.memory is None
            else memory_refusal(self.memory, self.worker_memory_bytes, "a worker's", "PLATFORM_WORKER_MEMORY_BYTES"),
        )
        return tuple(r for r in found if r)

    @property
    def refusals(self) -> tuple[str, ...]:
        return (*self.cluster, *self.step_refusals)

    @property
    def refusal(self) -> str | None:
        """One message for every limit the run is over, or None."""
        return "; ".join(self.refusals) or None

    @property
    def message(self) -> str | None:
        """What a refused launch (or the worker failing the run at start) says, or None."""
        parts = []
        if self.cluster:
            parts.append(f"this run asks too much of the cluster: {'; '.join(self.cluster)}")
        if self.step_refusals:
            parts.append(f"a step of this run is too large: {'; '.join(self.step_refusals)}")
        return "; ".join(parts) or None


def step_check(config: ExperimentConfig, owner, plan: BatchPlan | None = None) -> StepCheck:
    """The figures of a validated config's step (its `plan`, made here if not given) against
    `owner`'s limits and a worker's memory."""
    plan = plan or make_plan(config)
    try:
        # model.remat null: the worker's trainer turns remat on when the step needs it to fit
        memory = step_memory(config, plan, available_bytes=settings.PLATFORM_WORKER_MEMORY_BYTES)
    except ValueError:  # ModelFolderError: the folder went away; the config's own check says so
        memory = None
    limits = limits_for(owner)
    return StepCheck(plan, memory, limits, settings.PLATFORM_WORKER_MEMORY_BYTES, cluster_refusals(config, limits))


def start_refusal(raw_config: dict, owner) -> str | None:
    """What the worker fails a run with before starting anything (runner.ray_gang, before its Ray
    starts one process per host; runner.attempt): the run is over `owner`'s limits now. None when it
    is within them, or when the config no longer validates (the trainer's start reports that)."""
    try:
        config = configs.parse(raw_config, owner)
    except configs.ConfigError:
        return None
    return step_check(config, owner).message


def check_step_room(raw_config: dict, owner) -> None:
    """LaunchRefused(429) when a step of the run config `raw_config` (as Run.config holds it) is over
    `owner`'s caps or a worker's memory. A config that no longer validates is not refused here: the
    launch paths report its problems, and the worker fails the run with them."""
    try:
        config = configs.parse(raw_config, owner)
    except configs.ConfigError:
        return
    check = step_check(config, owner)
    if check.message:
        raise LaunchRefused(429, check.message)
