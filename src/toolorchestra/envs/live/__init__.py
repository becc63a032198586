"""Live question-answering worlds: HLE (`hle`, `hle:FILE`) and FRAMES with retrieval (`frames-live`).

Unlike the replay worlds, every call is bought from a real endpoint: the paper's three tools (tools/paper.py:
search, enhance_reasoning, answer) route each call by label to a pool model of a catalog (by default the
embedded SmolLM2, offline), and the orchestrator runs in the paper's protocol mode (agent/paper.py). This
package owns the question files (`questions.py`), the world (`env.py`), the judge (`judge.py`: match first,
then an LLM judge) and the recorder that turns a live run into a replay world (`record.py`).
"""
