"""Pool options: typed errors naming the field and the fix, paths relative to the config
file, the single in-process gateway staying the default, and least-loaded placement."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rollhub.errors import ConfigError, GatewayError
from rollhub.plugins import build_host
from rollhub.registry import ComponentContext
from rollhub_gateway.pool import GatewayPool, least_loaded
from rollhub_gateway.token_source import GatewayTokenSource

from tests.gateway.pool.pool_checks import pool_options


def build(options: dict, base_dir: Path | None = None) -> GatewayTokenSource:
    context = ComponentContext(base_dir=base_dir or Path.cwd(), exp_id="pool-options")
    return build_host().registry.build(
        "token_source", "gateway", options, section="token_source", context=context
    )


@pytest.mark.parametrize(
    ("pool", "extra", "field_", "words"),
    [
        ({"placement": "threads"}, {}, "token_source.pool.placement", "'processes' or 'ray'"),
        ({"replicas": 0}, {}, "token_source.pool.replicas", "greater than or equal to 1"),
        ({"replica": 2}, {}, "token_source.pool.replica", "unknown"),
        ({}, {"url": "http://127.0.0.1:9"}, "token_source.url", "drop one of them"),
        ({}, {"journal_path": "g.sqlite"}, "token_source.journal_path", "pool.journal_dir"),
        ({}, {"port": 8790}, "token_source.port", "drop token_source.port"),
        ({"engine_factory": "engines"}, {}, "token_source.pool.engine_factory", "module:callable"),
        ({"restarts": -1}, {}, "token_source.pool.restarts", "greater than or equal to 0"),
    ],
)
def test_bad_pool_settings_name_the_field_and_the_fix(pool, extra, field_, words):
    with pytest.raises(ConfigError) as err:
        build({"engine": {"name": "scripted"}, "pool": pool, **extra})
    assert err.value.field == field_
    assert words in str(err.value)


def test_no_pool_is_the_in_process_gateway_and_paths_follow_the_config_file(tmp_path):
    plain = build({"engine": {"name": "scripted"}})
    assert plain.options.pool is None and plain.pool is None

    source = build(
        {"pool": {"replicas": 3, "journal_dir": "journals", "engine_factory": "eng.py:make"}},
        base_dir=tmp_path,
    )
    pool = source.options.pool
    assert pool.replicas == 3 and pool.placement == "processes"
    assert pool.journal_dir == str(tmp_path / "journals")
    assert pool.engine_factory == f"{tmp_path / 'eng.py'}:make"
    absolute = build({"pool": {"engine_factory": "pkg.engines:make"}}, base_dir=tmp_path)
    assert absolute.options.pool.engine_factory == "pkg.engines:make"


def test_each_replica_gets_its_own_journal_file_and_the_pool_token(tmp_path):
    options = GatewayTokenSource.Options.model_validate(
        pool_options("m", replicas=2, journal_dir=str(tmp_path))
    )
    from rollhub_gateway.config import GatewayConfig

    config = GatewayConfig.model_validate(
        options.model_dump(exclude={"url", "request_timeout_s", "pool"})
    )
    pool = GatewayPool(config, options.pool)
    specs = [pool.spec(i) for i in range(2)]
    assert [s["config"]["journal_path"] for s in specs] == [
        str(tmp_path / "replica-0.sqlite"), str(tmp_path / "replica-1.sqlite"),
    ]  # fmt: skip
    assert {s["config"]["admin_token"] for s in specs} == {"pool-admin"}
    assert {s["config"]["port"] for s in specs} == {0}


async def test_a_replica_that_cannot_start_fails_start_with_its_stderr(model_dir):
    options = pool_options(model_dir, replicas=2)
    options["pool"]["engine_factory"] = "rollhub_gateway.engines.scripted:no_such_factory"
    source = GatewayTokenSource(GatewayTokenSource.Options.model_validate(options))
    with pytest.raises(GatewayError) as err:
        await source.start()
    message = str(err.value)
    assert "exited with exit code 1 before serving" in message
    assert "engine_factory = 'rollhub_gateway.engines.scripted:no_such_factory'" in message
    assert source.pool is None
    await source.close()


@dataclass
class R:
    index: int
    live: set[str] = field(default_factory=set)
    opened: int = 0
    dead: str | None = None
    restarting: bool = False
    draining: bool = False


def test_least_loaded_counts_live_sessions_then_sessions_given_then_index():
    a, b, c = R(0, {"x", "y"}, 5), R(1, {"z"}, 9), R(2, {"w"}, 3)
    assert least_loaded([a, b, c]) is c  # b and c tie on live sessions; c was given fewer
    c.dead = "exited with signal SIGKILL"
    assert least_loaded([a, b, c]) is b
    assert least_loaded([a, b, c], exclude=frozenset({1})) is a
    fresh = [R(i) for i in range(3)]
    picks = []
    for _ in range(6):
        r = least_loaded(fresh)
        r.live.add(str(r.opened))
        r.opened += 1
        picks.append(r.index)
    assert picks == [0, 1, 2, 0, 1, 2]
    # a replica being restarted takes sessions only when no other one serves
    fresh[0].live.clear()
    fresh[0].restarting = True
    assert least_loaded(fresh) is fresh[1]
    fresh[1].draining = True  # one moving to another node likewise
    assert least_loaded(fresh) is fresh[2]
    fresh[1].draining = False
    fresh[1].dead = fresh[2].dead = "exited with signal SIGKILL"
    assert least_loaded(fresh) is fresh[0]
    a.dead = b.dead = "stopped by the pool"
    with pytest.raises(GatewayError, match="replica 2: exited with signal SIGKILL"):
        least_loaded([a, b, c])


def test_replica_died_is_a_picklable_token_retrieval_error_with_its_context():
    import pickle

    from rollhub.errors import TokenRetrievalError
    from rollhub_gateway.pool import ReplicaDied

    err = ReplicaDied("gateway replica 1 died", replica=1, cause="exited", session_id="s")
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, TokenRetrievalError) and type(back) is ReplicaDied
    assert (back.replica, back.cause, back.session_id, str(back)) == (
        1, "exited", "s", "gateway replica 1 died",
    )  # fmt: skip
