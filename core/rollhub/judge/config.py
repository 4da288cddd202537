"""``[judge]``: who judges, how, and what it is shown.

::

    [judge]
    policy = "judge"          # a frozen [[policies]] entry served by the run's gateway
    mode = "rank"             # one call per group, every attempt scored against the others
    rubric = "The attempt must end with the product of the two numbers."

    # or any OpenAI-compatible endpoint:
    # base_url = "https://api.openai.com/v1"
    # model = "gpt-4o-mini"
    # api_key_env = "OPENAI_API_KEY"
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["JudgeConfig"]

DEFAULT_RUBRIC = (
    "Score how well each attempt accomplishes the task: correct, complete and to the point "
    "scores high; wrong, empty or off-task scores low."
)


class JudgeConfig(BaseModel):
    """Settings of the judge (:mod:`rollhub.judge`)."""

    model_config = ConfigDict(extra="forbid")

    policy: str | None = Field(
        None, description="a frozen [[policies]] entry that judges, served by the run's gateway"
    )
    base_url: str | None = Field(None, description="an OpenAI-compatible endpoint that judges")
    model: str | None = Field(None, description="the model name at base_url")
    api_key_env: str | None = Field(
        None, description="environment variable holding base_url's api key"
    )
    mode: Literal["rank", "score"] = Field(
        "rank",
        description="'rank': one call per group scores its attempts against each other "
        "(RULER-style); 'score': one call per episode",
    )
    name: str = Field("judge", description="the reward component the judge adds")
    rubric: str = Field(DEFAULT_RUBRIC, description="what a good attempt is, for the judge")
    task_field: str | None = Field(
        None, description="payload field shown as the task (None: the payload as JSON)"
    )
    answer_field: str | None = Field(
        None, description="result field shown as an attempt (None: the result as JSON)"
    )
    scale: int = Field(10, ge=1, description="scores run from 0 to scale (reward: score/scale)")
    max_tokens: int = Field(96, ge=1, description="the judge's reply length")
    temperature: float = Field(0.0, ge=0, description="the judge's sampling temperature")
    max_chars: int = Field(2000, ge=100, description="longest attempt shown (cut in the middle)")
    timeout_s: float = Field(120.0, gt=0, description="one judge call's deadline")

    @model_validator(mode="after")
    def _one_judge(self) -> JudgeConfig:
        if (self.policy is None) == (self.base_url is None):
            raise ValueError(
                "name the judge: either policy (a frozen [[policies]] entry) or base_url "
                "(an OpenAI-compatible endpoint, with model), not both"
            )
        if self.base_url is not None and not self.model:
            raise ValueError("base_url needs model (the model name at that endpoint)")
        return self
