"""What `orgmem` logs on a terminal: its own lines at the asked level, libraries' only when they matter."""

from __future__ import annotations

import logging

import pytest

from services.cli.main import configure_logging

TOUCHED = ("services", "workers", "schemas", "bench", "kafka.net.selector")


@pytest.fixture(autouse=True)
def restore_levels():
    saved = {name: logging.getLogger(name).level for name in TOUCHED}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def test_our_loggers_take_the_asked_level_and_kafka_pythons_loop_timing_warnings_are_dropped():
    configure_logging("info")
    assert logging.getLogger("services.app.indexer").getEffectiveLevel() == logging.INFO
    selector = logging.getLogger("kafka.net.selector")
    assert not selector.isEnabledFor(logging.WARNING) and selector.isEnabledFor(logging.ERROR)


def test_debug_shows_kafka_pythons_loop_warnings_again():
    configure_logging("INFO")
    configure_logging("DEBUG")
    assert logging.getLogger("kafka.net.selector").level == logging.NOTSET
    assert logging.getLogger("services").getEffectiveLevel() == logging.DEBUG


def test_an_unknown_log_level_is_a_usage_error_not_a_traceback(capsys):
    from services.cli.main import main

    with pytest.raises(SystemExit) as refused:
        main(["--log-level", "loud", "stats"])
    assert refused.value.code == 2
    assert "--log-level" in capsys.readouterr().err
