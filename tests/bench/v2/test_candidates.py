"""Benchmark v2's candidate sets: a development set and a frozen test set that share nothing."""

from __future__ import annotations

import json
from collections import Counter

import nas
from bench.v2.candidates import DEV_FAMILIES, TEST_ONLY_FAMILIES, dev_set
from bench.v2.candidates import test_set as frozen_test_set


def _key(spec: dict) -> str:
    return json.dumps(spec, sort_keys=True)


def test_the_sets_are_as_large_as_the_benchmark_needs():
    dev, test = dev_set(), frozen_test_set()
    fashion = Counter(c.dataset.startswith("fashion_mnist") for c in test)
    assert len(test) >= 100 and fashion[True] >= 60
    assert sum(c.dataset.startswith("fashion_mnist") for c in dev) >= 80
    assert {c.family for c in dev if c.dataset.startswith("fashion")} == set(DEV_FAMILIES)


def test_the_test_set_shares_no_candidate_with_the_development_set_and_has_families_of_its_own():
    dev, test = dev_set(), frozen_test_set()
    assert not {_key(c.spec) for c in dev} & {_key(c.spec) for c in test}
    assert all(c.id.startswith("test-") for c in test) and not any(c.id.startswith("test-") for c in dev)
    assert set(TEST_ONLY_FAMILIES) <= {c.family for c in test}
    assert not set(TEST_ONLY_FAMILIES) & {c.family for c in dev}
    assert len({c.id for c in dev + test}) == len(dev) + len(test)


def test_every_candidate_is_a_valid_spec_for_its_data():
    for c in dev_set() + frozen_test_set():
        summary = nas.summarize(c.spec)
        assert summary.parameters > 0, c.id
        if c.dataset.startswith("fashion_mnist"):
            assert c.spec["input_shape"] in ([1, 14, 14], [196]), c.id


def test_sampling_is_deterministic():
    assert [c.to_json() for c in frozen_test_set()] == [c.to_json() for c in frozen_test_set()]
    assert [c.to_json() for c in dev_set()] == [c.to_json() for c in dev_set()]


def test_the_validation_samples_share_no_candidate_with_the_benchmark_or_each_other() -> None:
    from bench.v2.candidates import FRESH_SAMPLES, fresh_set

    benchmark = {_key(c.spec) for c in dev_set() + frozen_test_set()}
    seen: set[str] = set()
    for sample, (_, _, prefix) in FRESH_SAMPLES.items():
        drawn = fresh_set(sample=sample)
        keys = {_key(c.spec) for c in drawn}
        assert len(drawn) == 102 and all(c.id.startswith(prefix) for c in drawn), sample
        assert not keys & benchmark and not keys & seen, sample
        assert {c.family for c in drawn} == {c.family for c in dev_set()}, sample
        seen |= keys
