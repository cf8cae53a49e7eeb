"""tests/xdist_worker_env.py: each pytest-xdist worker's own data folder and Redis database."""

import pytest

from tests.xdist_worker_env import ROOT, second_broker, worker_environment


def test_each_worker_counts_down_from_the_given_redis_database():
    environ = {"PLATFORM_DATA_DIR": "/data/test", "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15"}
    assert worker_environment(environ, "gw0") == {
        "PLATFORM_DATA_DIR": "/data/test/gw0",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15",
    }
    assert worker_environment(environ, "gw3") == {
        "PLATFORM_DATA_DIR": "/data/test/gw3",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/12",
    }


def test_the_embedded_default_needs_only_the_data_folder():
    assert worker_environment({}, "gw1") == {"PLATFORM_DATA_DIR": str(ROOT / "var" / "test-data" / "gw1")}


def test_a_broker_it_cannot_split_is_an_error():
    with pytest.raises(RuntimeError, match="no Redis database left"):
        worker_environment({"CELERY_BROKER_URL": "redis://h:6379/1"}, "gw2")
    with pytest.raises(RuntimeError, match="cannot give it its own broker"):
        worker_environment({"CELERY_BROKER_URL": "amqp://guest@h//"}, "gw0")


def test_a_served_platform_gets_a_database_no_worker_uses():
    assert second_broker("redis://127.0.0.1:6379/15") == "redis://127.0.0.1:6379/7"
    assert second_broker("redis://127.0.0.1:6379/12") == "redis://127.0.0.1:6379/4"
    assert second_broker("redis://h/3") == "redis://h/11"
