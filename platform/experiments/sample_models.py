"""Rollout samples: the completions a run's policy wrote, with their rewards and advantages, as
the trainer reported them (runner.db_hooks writes them; experiments.sample_query browses them;
experiments.sample_text renders their chat segments). A model of this app, imported by
experiments.models; this module imports no other module of the app."""

from __future__ import annotations

from django.db import models


class SampleKind(models.TextChoices):
    TRAIN = "train"
    EVAL = "eval"


class RolloutSample(models.Model):
    """One completion the policy wrote. `group` is its prompt's place in the step (the G
    completions of one prompt share it); `prompt_hash` (sha256 of the prompt text, hex, first 32)
    finds the same prompt at other steps."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey("experiments.Run", on_delete=models.CASCADE, related_name="samples")
    kind = models.CharField(max_length=8, choices=SampleKind.choices, default=SampleKind.TRAIN)
    step = models.IntegerField()
    index = models.IntegerField(default=0)
    group = models.IntegerField(default=0)
    prompt_hash = models.CharField(max_length=32, blank=True)
    prompt = models.TextField()
    completion = models.TextField()
    answer = models.TextField(blank=True)
    reward = models.FloatField(null=True, blank=True)
    advantage = models.FloatField(null=True, blank=True)
    extra = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run", "step", "index"]
        indexes = [
            models.Index(fields=["run", "step"]),
            models.Index(fields=["run", "kind", "step", "index"], name="sample_run_kind_step"),
            models.Index(fields=["run", "prompt_hash", "step"], name="sample_run_prompt"),
            models.Index(fields=["run", "reward"], name="sample_run_reward"),
            models.Index(fields=["run", "advantage"], name="sample_run_advantage"),
        ]
