"""A CPU stand-in for verl's rollout server: our local HF model behind `LLMServerClient.generate`.

`generate(request_id, *, prompt_ids, sampling_params)` samples with `transformers.generate` exactly as the
rollout engine does for one episode (train/rollout.py: do_sample, temperature, top_p, top_k off, the stop
token as eos) and returns verl's `TokenOutput`. Tests drive the verl agent loop with it; it is also a way
to step through the loop on a laptop without vLLM or SGLang.
"""

from __future__ import annotations

from typing import Any

from verl.workers.rollout.replica import TokenOutput


class LocalTokenServer:
    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.requests: list[str] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> TokenOutput:
        import torch

        self.requests.append(request_id)
        stop = list(sampling_params.get("stop_token_ids") or [self.tokenizer.eos_token_id])
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else stop[0]
        max_new = int(sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens") or 256)
        temperature = float(sampling_params.get("temperature", 1.0))
        top_k = int(sampling_params.get("top_k", -1))
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.model.device)
        with torch.no_grad():
            output = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_p=float(sampling_params.get("top_p", 1.0)),
                top_k=top_k if top_k > 0 else 0,
                max_new_tokens=max_new,
                eos_token_id=stop[0] if len(stop) == 1 else stop,
                pad_token_id=pad,
            )
        new = output[0, len(prompt_ids) :].tolist()
        for index, token in enumerate(new):
            if token in stop:
                new = new[: index + 1]
                break
        return TokenOutput(token_ids=new, stop_reason="completed")
