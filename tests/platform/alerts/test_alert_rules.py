"""Alerts' pure logic by hand: status events, threshold conditions and when a crossing is new, conditions
over the newest for_steps points (sustained, stuck, NaN, too few points), the collapse presets, stalls,
messages, backoff, the rate limit; the webhook URL guard (schemes, loopback, private, link-local,
IPv6, a name resolving to loopback, the admin's allow list) and masking."""

from __future__ import annotations

import datetime as dt

import pytest

from alerts import rules, url_guard

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def test_status_events():
    assert [rules.status_event(s) for s in ("failed", "succeeded", "pruned", "cancelled", "running", "queued")] == [
        "failed",
        "succeeded",
        "pruned",
        None,
        None,
        None,
    ]


@pytest.mark.parametrize(
    "comparison, value, holds",
    [
        (">", 0.6, True),
        (">", 0.5, False),
        (">=", 0.5, True),
        (">=", 0.49, False),
        ("<", 0.4, True),
        ("<", 0.5, False),
        ("<=", 0.5, True),
        ("<=", 0.51, False),
        (">", float("inf"), True),
        ("<", float("-inf"), True),
        (">", None, False),
        ("<", float("nan"), False),
    ],
)
def test_condition_holds(comparison, value, holds):
    assert rules.Condition("reward/mean", comparison, 0.5).holds(value) is holds


def test_a_crossing_is_new_once_until_the_metric_comes_back():
    c = rules.Condition("loss/policy", ">", 2.0)
    assert rules.new_crossing(c, [3.0], notified_before=False, fell_back_since=False)  # first crossing
    assert not rules.new_crossing(c, [3.5], notified_before=True, fell_back_since=False)  # still the same one
    assert rules.new_crossing(c, [2.5], notified_before=True, fell_back_since=True)  # came back, crossed again
    assert not rules.new_crossing(c, [1.0], notified_before=False, fell_back_since=False)  # not crossing
    assert not rules.new_crossing(c, [], notified_before=False, fell_back_since=False)  # no point yet
    assert rules.new_crossing(c, [1.0, 3.0], notified_before=False, fell_back_since=False)  # the newest counts
    assert c.describe() == "loss/policy > 2"


NAN = float("nan")
INF = float("inf")
T, F = True, False


def test_a_sustained_condition_holds_only_at_each_of_the_newest_points():
    c = rules.Condition("entropy", "<", 0.05, for_steps=3)
    assert c.holds_over([0.04, 0.03, 0.02])
    assert c.holds_over([0.06, 0.04, 0.03, 0.02])  # the older point is outside the window
    assert not c.holds_over([0.04, 0.06, 0.03])  # one of the three is above
    assert not c.holds_over([0.04, 0.03])  # fewer points than for_steps
    assert not c.holds_over([])
    assert not c.holds_over([0.04, None, 0.03])  # NaN (stored as None) crosses nothing
    assert not c.holds_over([0.01, NAN, 0.03, 0.02])
    assert not c.holds_over([0.04, 0.05, 0.03])  # < is strict
    #                 0.04   0.03   0.02  0.06   0.01   0.01   0.01
    assert rules.holding(c, [0.04, 0.03, 0.02, 0.06, 0.01, 0.01, 0.01]) == [F, F, T, F, F, F, T]
    assert c.describe() == "entropy < 0.05 for 3 steps"
    assert rules.Condition("entropy", "<", 0.05, for_steps=1).describe() == "entropy < 0.05"


def test_stuck_means_the_newest_points_vary_by_at_most_the_threshold():
    s = rules.Condition("reward/mean", "~", 0.25, for_steps=4)
    assert s.holds_over([1.0, 1.25, 1.125, 1.0])  # max - min = 0.25: at most, so stuck
    assert not s.holds_over([1.0, 1.25, 1.125, 0.875])  # 1.25 - 0.875 = 0.375
    assert s.holds_over([5.0, 1.0, 1.25, 1.125, 1.0])  # 5.0 is older than the window
    assert not s.holds_over([1.0, 1.0, 1.0])  # fewer points than for_steps
    assert not s.holds_over([1.0, None, 1.0, 1.0])  # a NaN in the window: not stuck
    assert s.holds_over([None, 1.0, 1.0, 1.0, 1.0])
    assert not s.holds_over([INF, INF, INF, INF])  # non-finite points are never stuck
    assert not s.holds_over([-INF, 1.0, 1.0, 1.0])
    assert s.describe() == "reward/mean stuck within 0.25 over 4 steps"
    assert rules.Condition("reward/mean", "~", 0.005, 20).describe() == "reward/mean stuck within 0.005 over 20 steps"
    with pytest.raises(ValueError, match="holds_over"):
        s.holds(1.0)


def test_stuck_windows_slide():
    s = rules.Condition("m", "~", 0.25, for_steps=3)
    values = [1.0, 1.125, 1.25, 2.0, 2.0, 2.25, None, 2.0, 2.0, 2.0]
    # windows: -, -, [1, 1.125, 1.25] 0.25, [1.125, 1.25, 2] 0.875, [1.25, 2, 2] 0.75, [2, 2, 2.25] 0.25,
    # NaN, then fewer than 3 finite points twice, then [2, 2, 2]
    assert rules.holding(s, values) == [F, F, T, F, F, T, F, F, F, T]
    assert [s.holds_over(values[: i + 1]) for i in range(len(values))] == [F, F, T, F, F, T, F, F, F, T]
    # the window's maximum leaves it: [3, 2, 1] 2.0, [2, 1, 1] 1.0, [1, 1, 1] 0
    assert rules.holding(rules.Condition("m", "~", 0.5, 3), [3.0, 2.0, 1.0, 1.0, 1.0]) == [F, F, F, F, T]
    # and its minimum: [0, 1, 2] 2.0, [1, 2, 2] 1.0, [2, 2, 2] 0
    assert rules.holding(rules.Condition("m", "~", 0.5, 3), [0.0, 1.0, 2.0, 2.0, 2.0]) == [F, F, F, F, T]


def test_fell_back_looks_at_the_windows_from_since_on():
    c = rules.Condition("entropy", "<", 0.05, for_steps=2)
    # notified at index 2 (0.02); then 0.06 breaks the window ending at index 3
    assert rules.fell_back(c, [0.01, 0.01, 0.02, 0.06, 0.01, 0.01], since=3)
    assert not rules.fell_back(c, [0.01, 0.01, 0.02, 0.01, 0.01], since=3)  # held throughout
    assert not rules.fell_back(c, [0.06, 0.01, 0.02, 0.01], since=2)  # the break is before since
    assert rules.fell_back(c, [0.01], since=0)  # an incomplete window does not hold
    s = rules.Condition("m", "~", 0.25, for_steps=2)
    assert rules.fell_back(s, [1.0, 1.0, 2.0, 2.0], since=2)  # [1, 2] spreads 1.0: stuck no more
    assert not rules.fell_back(s, [1.0, 1.0, 1.125, 1.0], since=2)


def test_the_collapse_detectors():
    assert [(p.slug, p.title, p.condition.describe()) for p in rules.COLLAPSE_DETECTORS] == [
        ("entropy-collapse", "Entropy collapse", "entropy < 0.05 for 5 steps"),
        ("reward-stuck", "Reward stuck", "reward/mean stuck within 0.005 over 20 steps"),
        ("sampler-mismatch", "Sampler mismatch", "mismatch/kl > 0.01 for 3 steps"),
    ]
    assert all(p.why for p in rules.COLLAPSE_DETECTORS)
    assert rules.preset("reward-stuck").for_steps == 20 and rules.preset("nope") is None
    mismatch = rules.preset("sampler-mismatch").condition
    assert not mismatch.holds_over([0.02, 0.02])  # two steps above: not yet
    assert mismatch.holds_over([0.02, 0.02, 0.011])


def test_stalled_after_the_setting():
    assert rules.is_stalled(T0, T0 + dt.timedelta(seconds=11), 10)
    assert not rules.is_stalled(T0, T0 + dt.timedelta(seconds=10), 10)
    assert not rules.is_stalled(None, T0, 10)


def test_a_quiet_trainers_message_says_where_it_is_stuck_and_cuts_long_stacks():
    title = rules.run_title("#7", "arith")
    where = "MainThread: in step 3 > generation (for 300 s), waiting on XLA compilation"
    message = rules.trainer_stalled_message(title, "the trainer reported nothing for 300 s", where, "stack", "u")
    assert message == (
        'Run #7 of "arith" has stalled: the trainer reported nothing for 300 s. u\n'
        f"Where it is: {where}\n\nPython stacks of the trainer's threads (most recent call first):\nstack"
    )
    long = rules.trainer_stalled_message(title, "h", where, "x" * (rules.MAX_ALERT_STACK_CHARS + 50), "u")
    assert long.count("x") == rules.MAX_ALERT_STACK_CHARS and long.endswith("[... cut; the run's log has them all]")


def test_messages():
    title = rules.run_title("#7", "arith")
    assert title == 'Run #7 of "arith"'
    assert rules.status_message(title, "failed", 3, 6, "step 3: loss is nan\nTraceback...", "http://x/runs/7/") == (
        'Run #7 of "arith" failed at step 3/6. Error: step 3: loss is nan http://x/runs/7/'
    )
    assert rules.status_message(title, "succeeded", 6, 6, "", "http://x/runs/7/") == (
        'Run #7 of "arith" succeeded at step 6/6. http://x/runs/7/'
    )
    assert (
        rules.stalled_message(title, 12.4, 5, "u")
        == 'Run #7 of "arith" has stalled: no heartbeat for 12 s (at step 5). u'
    )
    c = rules.Condition("reward/mean", "<", 0.1)
    assert (
        rules.metric_message(title, c, 0.05, 9, "u")
        == 'Run #7 of "arith": reward/mean = 0.05 at step 9 (reward/mean < 0.1). u'
    )
    assert rules.with_held_back("m", 0) == "m"
    assert rules.with_held_back("m", 2) == "m (+2 more alerts held back by the rate limit; see the delivery log)"


def test_backoff_and_rate_limit():
    assert [rules.retry_delay_s(n, 30) for n in (1, 2, 3)] == [30, 60, 120]
    assert rules.rate_limited(T0, T0 + dt.timedelta(seconds=59), 60)
    assert not rules.rate_limited(T0, T0 + dt.timedelta(seconds=60), 60)
    assert not rules.rate_limited(None, T0, 60)
    assert not rules.rate_limited(T0, T0, 0)


# --- the URL guard --------------------------------------------------------------------------------


def resolver(table: dict[str, list[str]]):
    def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError(f"[Errno -2] Name or service not known: {host}")
        return table[host]

    return resolve


PUBLIC = resolver(
    {
        "hooks.example.com": ["93.184.216.34"],
        "sneaky.example.com": ["127.0.0.1"],
        "mixed.example.com": ["93.184.216.34", "10.1.2.3"],
        "v6.example.com": ["2606:4700::1111"],
        "internal.corp": ["10.0.0.5"],
    }
)


@pytest.mark.parametrize(
    "url, reason",
    [
        ("https://hooks.example.com/services/T/B/secret", ""),
        ("http://hooks.example.com:8080/x", ""),
        ("https://v6.example.com/x", ""),
        ("ftp://hooks.example.com/x", "only http:// and https://"),
        ("file:///etc/passwd", "only http:// and https://"),
        ("https:///nohost", "has no host"),
        ("", "is required"),
        ("http://127.0.0.1:9000/hook", "local or private network"),
        ("http://10.2.3.4/hook", "local or private network"),
        ("http://192.168.1.10/hook", "local or private network"),
        ("http://172.16.0.1/hook", "local or private network"),
        ("http://169.254.169.254/latest/meta-data", "local or private network"),  # cloud metadata
        ("http://[::1]:8000/hook", "local or private network"),
        ("http://[::ffff:127.0.0.1]/hook", "local or private network"),
        ("http://[fe80::1]/hook", "local or private network"),
        ("http://224.0.0.1/hook", "local or private network"),
        ("http://0.0.0.0/hook", "local or private network"),
        ("https://sneaky.example.com/hook", "sneaky.example.com (127.0.0.1) is in a local or private network"),
        ("https://mixed.example.com/hook", "(10.1.2.3) is in a local or private network"),
        ("https://nowhere.invalid/hook", "cannot resolve"),
        ("http://hooks.example.com:99999/x", "not a valid URL"),
        ("http://hooks.example.com/a b", "spaces"),
    ],
)
def test_url_guard(url, reason):
    refusal = url_guard.refusal(url, allow=[], resolver=PUBLIC)
    if reason:
        assert reason in refusal
    else:
        assert refusal == ""
    if "local or private" in reason:
        assert "PLATFORM_ALERT_WEBHOOK_ALLOW" in refusal


def test_a_real_name_resolving_to_loopback_is_refused():
    refusal = url_guard.refusal("http://localhost:8000/hook", allow=[])
    assert "localhost" in refusal and "local or private network" in refusal
    # a non-canonical spelling of 127.0.0.1 goes through the system's resolver, and is refused too
    assert "(127.0.0.1) is in a local or private network" in url_guard.refusal("http://127.1/hook", allow=[])


def test_the_admins_allow_list():
    allow = ["127.0.0.1", "10.0.0.0/8", "internal.corp", "::1"]
    assert url_guard.refusal("http://127.0.0.1:9000/hook", allow=allow, resolver=PUBLIC) == ""
    assert url_guard.refusal("http://10.200.1.1/hook", allow=allow, resolver=PUBLIC) == ""
    assert url_guard.refusal("http://internal.corp/hook", allow=allow, resolver=PUBLIC) == ""
    assert url_guard.refusal("http://[::1]/hook", allow=allow, resolver=PUBLIC) == ""
    assert "local or private" in url_guard.refusal("http://192.168.0.1/hook", allow=allow, resolver=PUBLIC)
    assert "local or private" in url_guard.refusal("http://127.0.0.2/hook", allow=allow, resolver=PUBLIC)
    # the name is allowed, not what else resolves to the same address
    assert "local or private" in url_guard.refusal(
        "https://sneaky.example.com/h", allow=["internal.corp"], resolver=PUBLIC
    )


def test_saving_accepts_a_name_that_does_not_resolve_now():
    assert url_guard.refusal("https://nowhere.invalid/hook", resolve_required=False, allow=[], resolver=PUBLIC) == ""
    assert url_guard.refusal("http://10.0.0.1/hook", resolve_required=False, allow=[], resolver=PUBLIC) != ""


def test_masked_targets_never_show_the_secret():
    secret = "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXsecretZZ9f"
    assert url_guard.masked(secret) == "https://hooks.slack.com/…ZZ9f"
    assert (
        url_guard.masked("http://user:pw@host.example:8080/hook?token=abcdef0123456789")
        == "http://host.example:8080/…6789"
    )
    assert url_guard.masked("http://127.0.0.1:9000/short") == "http://127.0.0.1:9000/…"
    assert url_guard.masked("https://example.com") == "https://example.com/"
    assert url_guard.masked("http://[::1]:8000/a") == "http://[::1]:8000/…"
