"""The inference side of `crossmod serve`: a LitServe `LitAPI` whose worker holds every served culture.

LitServe gathers requests into a batch (up to `max_batch_size` requests, waiting at most `batch_timeout` seconds); the
worker flattens their memes into one list, scores it for every culture in one forward per body
(src/crossmod/serving/cultures.py) and hands each request its own rows. Requests were checked field by field in the HTTP
process (src/crossmod/serving/memes.py); what only the models know (a culture reads images, a meme has none) is answered
per request with a 422 naming the field, so one bad request never fails the others of its batch.
"""

# No `from __future__ import annotations`: LitServe reads decode_request's annotation as the request's body type.

import os
from typing import Any

import litserve as ls
from fastapi.responses import JSONResponse

from crossmod.serving.memes import ClassifyRequest

CLASSIFY_PATH = "/v1/classify"


class CultureAPI(ls.LitAPI):
    """Every culture of `folders`, answered per meme: per culture `p`, `p_calibrated`, `decision`, the policy's
    `action` and name, a retrieval culture's neighbours; across cultures their `disagreement`."""

    def __init__(
        self,
        folders: list[str],
        bases: dict[str, str | None] | None = None,
        threshold: float = 0.5,
        disagreement: str = "spread",
        allow_missing: tuple[str, ...] = (),
        max_batch_size: int = 8,
        batch_timeout: float = 0.01,
        threads: int | None = None,
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, batch_timeout=batch_timeout, api_path=CLASSIFY_PATH)
        self.folders, self.bases, self.threshold, self.disagreement = list(folders), bases, threshold, disagreement
        self.allow_missing, self.threads = frozenset(allow_missing), threads

    def setup(self, device: str) -> None:
        """Load every culture onto `device` (in LitServe's inference worker process)."""
        import torch

        from crossmod.runtime.console import configure_console
        from crossmod.serving.cultures import ServedCultures

        if self.threads:
            torch.set_num_threads(self.threads)
        configure_console()
        self.cultures = ServedCultures.load(self.folders, self.bases, self.threshold, self.disagreement).to(device)
        self.needs = self.cultures.needs - self.allow_missing
        print(
            f"[serve] worker {os.getpid()}: {len(self.cultures.cultures)} cultures on {self.cultures.forwards()} forward pass(es) per batch, {device}",
            flush=True,
        )

    def decode_request(self, request: ClassifyRequest) -> Any:
        """The request's memes as sample dicts, or the 422 that names what a served model needs and a meme lacks."""
        records = [meme.record() for meme in request.memes]
        lacking = [
            {
                "loc": ["body", "memes", position, name],
                "msg": f"a served culture reads the {name}, and this meme has none",
                "type": "missing_input",
            }
            for position, record in enumerate(records)
            for name in sorted(self.needs)
            if (name == "text" and not str(record["text"]).strip()) or (name == "image" and record["image"] is None)
        ]
        return JSONResponse({"detail": lacking}, status_code=422) if lacking else records

    def batch(self, inputs: list[Any]) -> list[Any]:
        return inputs

    def predict(self, batched: Any) -> Any:
        """One scoring of every valid request's memes together; each request gets back its own rows. With
        `max_batch_size=1` LitServe hands over one request, not a list of them."""
        single = self.max_batch_size <= 1
        requests = [batched] if single else batched
        records = [record for request in requests if isinstance(request, list) for record in request]
        rows = self.cultures.rows(records) if records else []
        answers, start = [], 0
        for request in requests:
            if isinstance(request, list):
                answers.append(rows[start : start + len(request)])
                start += len(request)
            else:
                answers.append(request)
        return answers[0] if single else answers

    def unbatch(self, output: list[Any]) -> list[Any]:
        return output

    def encode_response(self, output: Any) -> Any:
        if isinstance(output, JSONResponse):
            return output
        policies = {c.name: (c.policy or {}).get("name") for c in self.cultures.cultures}
        return {"memes": [answer(row, policies) for row in output]}


def answer(row: dict[str, Any], policies: dict[str, str | None]) -> dict[str, Any]:
    """A predict row as the API's answer: per culture (`policies`: each served culture's policy name) its fields."""
    out: dict[str, Any] = {"id": row["id"], "cultures": {}}
    for name, policy in policies.items():
        fields: dict[str, Any] = {}
        if f"{name}_probability" in row:
            fields["p"] = row[f"{name}_probability"]
            fields["p_calibrated"] = row.get(f"{name}_probability_calibrated")
            fields["decision"] = row[f"{name}_decision"]
        else:
            fields["probabilities"] = row[f"{name}_probabilities"]
        if f"{name}_action" in row:
            fields["action"], fields["policy"] = row[f"{name}_action"], policy
        if f"{name}_neighbours" in row:
            fields["neighbours"] = [
                {"id": i, "label": label, "similarity": s}
                for i, label, s in zip(
                    row[f"{name}_neighbours"], row[f"{name}_neighbour_labels"], row[f"{name}_neighbour_similarities"], strict=True
                )
            ]
        out["cultures"][name] = fields
    if "disagreement" in row:
        out["disagreement"] = row["disagreement"]
    return out
