"""Property test: `ttrl pool validate` and `ttrl bon` agree on every corrupted pool.

For seeded random corruptions of a small valid pool (drop a field, change a type, a NaN / inf / 1e308 /
huge-integer / string / boolean token value, a duplicated record, a truncated file, bytes that are not
UTF-8), both commands either accept the file -- and `ttrl bon` prints and writes finite numbers only -- or
both refuse it with exit code 1 and one line on stderr naming the file, with no traceback.
"""
import json
import math
import random
import re

import pytest

from ttrl_lightning.cli import main
from ttrl_lightning.data.pool import pool_to_records
from ttrl_lightning.data.simulate import simulate_pool

KINDS = ("drop_field", "change_type", "bad_number", "duplicate_record", "truncate", "invalid_utf8",
         "valid_extreme")
CASES = 49  # 7 per kind
#: Token values that must be refused (NaN, infinities, beyond float32, an integer beyond float, a numeric
#: string, a boolean -- an int in Python), one per case of the kind "bad_number".
BAD_VALUES = (math.nan, math.inf, -math.inf, 1e308, 10 ** 400, "0.5", True)
#: What a refusal's one line starts with: the command's prefix (or the dispatcher's generic one).
REFUSAL = re.compile(r"^(ttrl (pool|bon)|error)\b")


def _valid_records() -> list[dict]:
    pool = simulate_pool(num_questions=4, rollouts=3, tokens=3, seed=7)
    return [json.loads(json.dumps(r)) for r in pool_to_records(pool)]  # plain JSON values


def _random_path(rng: random.Random, rec: dict) -> tuple[dict, str]:
    """A random field of a record or of one of its rollouts: the object holding it and its key."""
    ro = rng.choice(rec["rollouts"])
    holders = [(rec, k) for k in rec] + [(ro, k) for k in ro]
    return rng.choice(holders)


def _corrupt(kind: str, rng: random.Random, index: int = 0) -> tuple[bytes, str]:
    """Bytes of a corrupted pool file and a description of the corruption (for failure messages); ``index``
    (the case's number within its kind) picks the bad value of "bad_number"."""
    records = _valid_records()
    i = rng.randrange(len(records))
    rec = records[i]
    what = kind
    if kind == "drop_field":
        holder, key = _random_path(rng, rec)
        del holder[key]
        what = f"record {i}: drop {key!r}"
    elif kind == "change_type":
        holder, key = _random_path(rng, rec)
        holder[key] = rng.choice([None, True, 0, 1.5, math.nan, 10 ** 400, "x", [], {}, [1, "a"],
                                  {"A": "cat"}])
        what = f"record {i}: {key!r} = {holder[key]!r}"
    elif kind in ("bad_number", "valid_extreme"):
        ro = rng.choice([r for r in rec["rollouts"] if r["view"] == "original"])
        name = rng.choice([k for k, v in ro.items() if isinstance(v, list)])
        t = rng.randrange(len(ro[name]))
        # finite in float32 (or a legal share), so they must be accepted and give finite numbers
        extreme = [0.0, 1.0] if name in ("visual_engagement", "image_attention") else [3.0e38, -3.0e38, 1e-45]
        ro[name][t] = BAD_VALUES[index % len(BAD_VALUES)] if kind == "bad_number" else rng.choice(extreme)
        what = f"record {i}: {name}[{t}] = {ro[name][t]!r}"
    elif kind == "duplicate_record":
        records.insert(rng.randrange(len(records) + 1), dict(rec))
        what = f"record {i} twice"
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    if kind == "truncate":  # inside a record, or at a line end (fewer records; none at all)
        ends = [0] + [k + 1 for k, b in enumerate(data) if b == ord("\n")][:-1]
        cut = rng.choice(ends) if rng.random() < 0.4 else rng.randrange(len(data))
        what = f"truncated to {cut} of {len(data)} bytes"
        data = data[:cut]
    elif kind == "invalid_utf8":
        raw = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            raw[rng.randrange(len(raw))] = rng.choice([0xFF, 0xFE, 0x80, 0xC3])
        data = bytes(raw)
        if data.decode("utf-8", errors="replace") == data.decode("latin-1"):  # pragma: no cover - still ASCII
            what += " (stayed valid)"
    return data, what


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of one in-process `ttrl` call; an exception escaping the command is a
    failure of the contract (the user would see a traceback), reported as such."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # noqa: BLE001 - the point is that nothing escapes
        out, err = capsys.readouterr()
        pytest.fail(f"`ttrl {' '.join(argv[:2])}` raised {type(e).__name__}: {e} (stderr: {err!r})")
    out, err = capsys.readouterr()
    return rc, out, err


def _strict_json(path: str):
    def refuse(constant):
        raise AssertionError(f"non-finite literal {constant} in {path}")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh, parse_constant=refuse)


def _numbers(obj):
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v)


@pytest.mark.parametrize("case", range(CASES))
def test_validate_and_bon_agree_on_corrupted_pools(case, tmp_path, capsys):
    kind = KINDS[case % len(KINDS)]
    data, what = _corrupt(kind, random.Random(1000 + case), case // len(KINDS))
    pool = tmp_path / "pool.jsonl"
    pool.write_bytes(data)
    report = tmp_path / "report.json"
    rc_v, out_v, err_v = _run(["pool", "validate", str(pool)], capsys)
    rc_b, out_b, err_b = _run(["bon", "--pool", str(pool), "--n", "2", "--subsets", "2", "--bootstrap", "0",
                               "--no-progress", "--out", str(report)], capsys)
    context = f"{kind}: {what}; validate rc={rc_v} {err_v.strip()!r}; bon rc={rc_b} {err_b.strip()!r}"
    assert (rc_v, rc_b) in ((0, 0), (1, 1)), context
    if rc_v == 0:
        assert "OK" in out_v, context
        assert not re.search(r"\b(nan|inf)\b", out_b, flags=re.IGNORECASE), context
        values = list(_numbers(_strict_json(str(report))["accuracy"]))
        assert values and all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values), context
        return
    for err in (err_v, err_b):
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, context
        assert REFUSAL.match(lines[0]) and "pool.jsonl" in lines[0], context


def test_corruptions_cover_both_outcomes_and_every_kind(tmp_path):
    """The generator is not vacuous: some corruptions leave a valid pool (dropping 'gold' or 'text',
    extreme finite values) and most make it invalid; every kind occurs."""
    from ttrl_lightning.data.pool import PoolError, load_pool

    outcomes = {}
    for case in range(CASES):
        kind = KINDS[case % len(KINDS)]
        data, _ = _corrupt(kind, random.Random(1000 + case), case // len(KINDS))
        path = tmp_path / f"c{case}.jsonl"
        path.write_bytes(data)
        try:
            load_pool(str(path))
            ok = True
        except PoolError:
            ok = False
        outcomes.setdefault(kind, set()).add(ok)
    assert set(outcomes) == set(KINDS)
    assert outcomes["valid_extreme"] == {True}
    assert outcomes["bad_number"] == {False} and outcomes["invalid_utf8"] == {False}
    assert any(True in v for k, v in outcomes.items() if k != "valid_extreme")


def test_bon_report_says_how_many_questions_had_no_gold(tmp_path, capsys):
    """Dropping 'gold' is accepted by both commands (an unlabelled question is valid); `ttrl bon` then scores
    the others and its report says how many it left out, instead of scoring them 0."""
    records = _valid_records()
    records[1]["gold"] = None
    del records[3]["gold"]
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = tmp_path / "report.json"
    assert _run(["pool", "validate", str(pool)], capsys)[0] == 0
    rc, out, err = _run(["bon", "--pool", str(pool), "--methods", "oracle", "--n", "3", "--bootstrap", "0",
                         "--no-progress", "--out", str(report)], capsys)
    assert rc == 0, err
    data = _strict_json(str(report))
    assert data["num_questions"] == 2 and data["questions_without_gold"] == 2
    # every question of this pool has a correct rollout: 1.0 on the graded two; scoring the others 0 gives 0.5
    assert data["accuracy"]["oracle"]["3"] == 1.0
