"""Deployment profiles: one study's runs judged again under each profile's own objective and SLOs
(`profiles:` in the study file), so that a latency profile and a throughput profile each get the
config that is best for them, with the evidence.

A profile is the study's spec with its `objective` replaced, handed to the same `analyze`: the
objective samples, the SLO proof (tune/slo_proof.py) and the selection-calibrated verdict rule
(tune/verdict_rule.py) are the study's own, so a profile's winner is named only where the rule
names one. The rule's design is the study's (its screen, finalists and re-validation cap), whose
simulation picks the finalists by the very statistic it then tests; a profile's finalists were
picked by the study's objective instead, which biases the profile's statistic of a finalist no
more than picking by that statistic would, and its calibrated p-value is the null chance of any
finalist reaching its statistic at any look, so choosing among the finalists by a profile is
covered. A config the study did not re-validate was measured on one boot and can be
promising for a profile at most, never its winner: the report says so, and the profile's
deployment is then the baseline's, as the study's is.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..store import StudyStore
from ..study.spec import StudySpec
from .analysis import analyze
from .types import StudyAnalysis


def profile_spec(spec: StudySpec, name: str) -> StudySpec:
    """The study as the profile `name` judges it: its objective and SLOs in place of the study's
    (validated with the study file, so not again here)."""
    return spec.model_copy(update={"objective": spec.profiles[name]})


def analyze_profiles(store: StudyStore, spec: StudySpec,
                     extra_metrics: Sequence[str] = ()) -> dict[str, StudyAnalysis]:
    """Each profile's conclusion from the study's store, in the study file's order (none without
    profiles)."""
    return {name: analyze(store, profile_spec(spec, name), extra_metrics) for name in spec.profiles}
