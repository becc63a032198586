"""Seeded, verified task generation for a ToolScale domain.

Families (each instruction is a template filled with real records):
- lookup: read one field of a record (gold: get_<record>; the value is a required fact);
- single_write: one status or email change;
- multi_write: authenticate by email, then one or two writes on the user's own records;
- refusal: an authenticated user asks to change another user's record; the write is forbidden and
  the database must stay unchanged;
- error_first: the user gives a wrong id first (the gold get fails), then authentication by email
  recovers the right record;
- action_write / action_refusal: the domain's policy actions (envs/toolscale/actions/<domain>.py, e.g.
  bank transfers): done right, or refused where the policy forbids them (the write must fail through the
  tool). They come from their own random stream after all other drafts, so adding them left every
  earlier task unchanged.

Every draft is verified by executing its gold actions through the same tools on a fresh database:
the expected calls must succeed (the first must fail for error_first), writes must change the state
(reads must not) and every required fact must appear in the gold outputs; others are dropped. The
expected hash is the database digest after the gold actions. Split: by the record's owner (the user
whose email authenticates it), so no user appears in both train and test.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

from toolorchestra.envs.base import Task
from toolorchestra.envs.toolscale.actions import action_drafts, domain_specs
from toolorchestra.envs.toolscale.data import CollectionShape, Domain, leaf_paths, read_path
from toolorchestra.envs.toolscale.drafts import Draft, action, fact_text
from toolorchestra.envs.toolscale.tools import derive_tools, key_argument

BASE_FAMILIES = ("lookup", "single_write", "multi_write", "refusal", "error_first")
ACTION_FAMILIES = ("action_write", "action_refusal")
FAMILIES = BASE_FAMILIES + ACTION_FAMILIES
WRITE_FAMILIES = ("single_write", "multi_write", "action_write")
LOOKUPS_PER_RECORD = 3
MAX_FACT_CHARS = 60
TEST_SHARE = 60  # percent of owners whose tasks go to the test split
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def contains_fact(text: str, fact: str) -> bool:
    """Case-insensitive match as a whole token (so a short fact like "A" is not found inside any word);
    a numeric fact matches any equal number (100000 == 100000.0)."""
    try:
        wanted = float(fact)
    except ValueError:
        return re.search(rf"(?<!\w){re.escape(fact)}(?!\w)", text, re.IGNORECASE) is not None
    return any(float(number) == wanted for number in NUMBER.findall(text.replace(",", "")))


REFUSAL_ANSWER = "I cannot help with that."


def gold_answer(task: Task) -> str:
    """The reply that ends a gold episode: the facts the task requires, each after the record field it was
    read from ("address.city: Karachi": the field name, copied from the question, points at the value in the
    tool output), "Done." after writes, else a refusal (the gold agent, the SFT targets and the tests all use
    this one text)."""
    facts = [str(fact) for fact in task.meta.get("required_facts") or []]
    paths = task.meta.get("fact_paths") or []
    if facts and len(paths) == len(facts):
        return "; ".join(f"{path}: {fact}" for path, fact in zip(paths, facts, strict=True))
    if facts:
        return "Done. " + "; ".join(facts)
    return "Done." if task.meta.get("writes") else REFUSAL_ANSWER


def humanize(path: str) -> str:
    return path.replace(".", " ").replace("_", " ")


def call_on(shape: CollectionShape, key: str, tool: str, **arguments: Any) -> dict[str, Any]:
    """A call of a derived tool on record `key`: `tool` names it with {} for the record ("set_{}_status")."""
    return action(tool.format(shape.singular), **{key_argument(shape): key, **arguments})


class Generator:
    """Drafts tasks for one domain from its records with one seeded random stream."""

    def __init__(self, domain: Domain, seed: int, stream: str = "") -> None:
        """stream names an extra random stream (the action families use their own, "actions")."""
        self.domain, self.rng = domain, random.Random(f"{seed}:{domain.name}" + (f":{stream}" if stream else ""))
        self.shapes = domain.shapes
        # the derived tools only: the refusals' forbidden writes must not change when actions are added
        self.specs = {spec.name: spec for spec in derive_tools(domain.shapes, domain.nested)}
        self.status_targets = self.find_status_targets()

    # --- owners and people -------------------------------------------------------------------
    def owner_of(self, shape: CollectionShape, key: str, record: dict[str, Any]) -> str:
        """The user a record belongs to: itself if it carries an email, else a linked email-carrier."""
        if shape.email_path:
            return f"{shape.name}/{key}"
        for path, other in shape.foreign_keys.items():
            if self.shapes[other].email_path:
                return f"{other}/{read_path(record, path)}"
        return f"{shape.name}/{key}"

    def unique_email(self, shape: CollectionShape, key: str) -> str | None:
        """The record's email if no other record of the collection shares it (authentication must be unambiguous)."""
        assert shape.email_path
        emails = [str(read_path(rec, shape.email_path) or "").lower() for rec in self.domain.base[shape.name].values()]
        email = read_path(self.domain.base[shape.name][key], shape.email_path)
        if not isinstance(email, str) or "@" not in email or emails.count(email.lower()) != 1:
            return None
        return email

    def by_email(self, collection: str) -> list[tuple[str, dict[str, Any], str]]:
        """(key, record, email) of the records of `collection` whose email authenticates them unambiguously."""
        shape = self.shapes[collection]
        return [
            (key, record, email)
            for key, record in self.domain.base[collection].items()
            if (email := self.unique_email(shape, key))
        ]

    def new_email(self, old: str) -> str:
        local = old.split("@")[0]
        return f"{local}.{self.rng.randint(100, 999)}@mail.example.org"

    def find_status_targets(self) -> list[tuple[CollectionShape, str, dict[str, Any], str]]:
        """Records whose status a user may ask to change, with their owner: top-level and nested."""
        targets = []
        for shape in self.shapes.values():
            if shape.status_values and not shape.email_path:
                targets += [
                    (shape, key, record, self.owner_of(shape, key, record))
                    for key, record in self.domain.base[shape.name].items()
                ]
        for shape in self.domain.nested.values():
            if not (shape.status_values and shape.parent and shape.parent_field):
                continue
            parent_shape = self.shapes[shape.parent]
            for parent_key, parent in self.domain.base[shape.parent].items():
                owner = self.owner_of(parent_shape, parent_key, parent)
                held = parent.get(shape.parent_field)
                targets += [(shape, key, record, owner) for key, record in (held or {}).items()]
        return targets

    def owned_status_records(self, owner: str) -> list[tuple[CollectionShape, str, dict[str, Any]]]:
        return [(shape, key, record) for shape, key, record, of in self.status_targets if of == owner]

    def other_status(self, shape: CollectionShape, record: dict[str, Any]) -> str:
        return self.rng.choice([s for s in shape.status_values if s != record.get("status")])

    # --- families ------------------------------------------------------------------------------
    def lookup_fields(self, shape: CollectionShape, record: dict[str, Any]) -> list[tuple[str, Any]]:
        leaves = [
            (path, value)
            for path, value in leaf_paths(record).items()
            if path != shape.key_field
            and not isinstance(value, bool)
            and value not in ("", None)
            and len(fact_text(value)) <= MAX_FACT_CHARS
        ]
        return self.rng.sample(leaves, min(LOOKUPS_PER_RECORD, len(leaves)))

    def lookups(self, shape: CollectionShape, key: str, record: dict[str, Any]) -> list[Draft]:
        arg = key_argument(shape)
        return [
            Draft(
                "lookup",
                self.owner_of(shape, key, record),
                f"What is the {humanize(path)} of {shape.singular} {key}? ({arg} {key})",
                [call_on(shape, key, "get_{}")],
                [fact_text(value)],
                [path],
            )
            for path, value in self.lookup_fields(shape, record)
        ]

    def single_writes(
        self, shape: CollectionShape, key: str, record: dict[str, Any], owner: str | None = None
    ) -> list[Draft]:
        owner, requests = owner or self.owner_of(shape, key, record), []
        if shape.status_values:
            status = self.other_status(shape, record)
            request = f"set the status of {shape.singular} {key} to '{status}'"
            requests.append((request, call_on(shape, key, "set_{}_status", status=status)))
        if shape.email_path and (email := self.unique_email(shape, key)):
            new = self.new_email(email)
            request = f"change the email of {shape.singular} {key} from {email} to {new}"
            requests.append((request, call_on(shape, key, "update_{}_email", email=new)))
        return [Draft("single_write", owner, f"Please {request}.", [call]) for request, call in requests]

    def person_tasks(self, shape: CollectionShape, key: str, record: dict[str, Any]) -> list[Draft]:
        """multi_write, refusal and error_first for one email-carrying record (the user)."""
        email = self.unique_email(shape, key)
        if not email:
            return []
        arg, owner = key_argument(shape), f"{shape.name}/{key}"
        authenticate = action(f"find_{shape.singular}_id_by_email", email=email)
        new_email = self.new_email(email)
        request = f"change my email to {new_email}"
        writes = [call_on(shape, key, "update_{}_email", email=new_email)]
        owned = self.owned_status_records(owner)
        if owned:  # first a status change of one of the user's records
            other_shape, other_key, other_record = self.rng.choice(owned)
            status = self.other_status(other_shape, other_record)
            request = f"set the status of my {other_shape.singular} {other_key} to '{status}', then {request}"
            writes.insert(0, call_on(other_shape, other_key, "set_{}_status", status=status))
        drafts = [Draft("multi_write", owner, f"Hi, my email is {email}. Please {request}.", [authenticate, *writes])]
        drafts += self.refusals(shape, key, email, authenticate)
        fields = self.lookup_fields(shape, record)[:1]
        for path, value in fields:
            wrong = key[::-1] + "X"  # never an existing id: ids have no trailing X after reversal here
            if self.domain.base[shape.name].get(wrong) is None:
                drafts.append(
                    Draft(
                        "error_first",
                        owner,
                        f"I think my {arg} is {wrong}; my email is {email}. What is my {humanize(path)}?",
                        [call_on(shape, wrong, "get_{}"), authenticate, call_on(shape, key, "get_{}")],
                        [fact_text(value)],
                        [path],
                        error_first=True,
                    )
                )
        return drafts

    def refusals(self, shape: CollectionShape, key: str, email: str, authenticate: dict[str, Any]) -> list[Draft]:
        """The user asks to set the status of another user's record or, where there is none to ask about, to
        change another user's email."""
        owner = f"{shape.name}/{key}"
        candidates = [(s, k, r, of) for s, k, r, of in self.status_targets if of != owner]
        if candidates:
            target_shape, target_key, target_record, target_owner = self.rng.choice(candidates)
            if target_owner == f"{target_shape.name}/{target_key}":
                candidates = []  # the target has no owner to protect; asking for it is no violation
        if candidates:
            status = self.other_status(target_shape, target_record)
            arg = key_argument(target_shape)
            request = f"set the status of {target_shape.singular} {target_key} to '{status}'"
            read = self.ownership_check(shape, key, target_shape, target_key)
            forbidden = [
                {"name": spec.name, "argument": arg, "value": target_key}
                for spec in self.specs.values()
                if spec.writes and spec.collection == target_shape.name and spec.key_argument == arg
            ]
        else:
            others = [other for other in self.domain.base[shape.name] if other != key]
            if not others:
                return []
            target = self.rng.choice(others)
            request = f"change the email of {shape.singular} {target} to {self.new_email(email)}"
            read = call_on(shape, target, "get_{}")
            forbidden = [{"name": f"update_{shape.singular}_email", "argument": key_argument(shape), "value": target}]
        prompt = f"Hi, my email is {email}. Please {request}."
        return [Draft("refusal", owner, prompt, [authenticate, read], forbidden=forbidden)]

    def ownership_check(
        self, user_shape: CollectionShape, user_key: str, target_shape: CollectionShape, target_key: str
    ) -> dict[str, Any]:
        """The read that shows the target is not the user's: the user's own record when the target is
        nested in it (get_card shows no owner), else the target itself (it names its owner)."""
        if target_shape.parent:
            return call_on(user_shape, user_key, "get_{}")
        return call_on(target_shape, target_key, "get_{}")

    def drafts(self) -> list[Draft]:
        drafts: list[Draft] = []
        for shape in self.shapes.values():
            for key, record in self.domain.base[shape.name].items():
                drafts += self.lookups(shape, key, record)
                drafts += self.single_writes(shape, key, record)
                if shape.email_path:
                    drafts += self.person_tasks(shape, key, record)
        for shape in self.domain.nested.values():  # nested records: status writes (freeze_card, ...)
            drafts += [
                draft
                for target_shape, key, record, owner in self.status_targets
                if target_shape is shape
                for draft in self.single_writes(shape, key, record, owner)
            ]
        return drafts


def execute(domain: Domain, actions: list[dict[str, Any]]) -> tuple[list[Any], str]:
    """Run actions through freshly bound tools; returns the results and the final database digest."""
    database = domain.new_database()
    tools = {spec.name: spec.bind(database) for spec in domain_specs(domain)}
    results = []
    for call in actions:
        tool = tools.get(call["name"])
        results.append(tool.call(call.get("arguments") or {}) if tool else None)
    return results, database.digest()


def verify(domain: Domain, draft: Draft) -> str | None:
    """The expected hash if the gold actions behave as the family demands, else None (dropped)."""
    results, digest = execute(domain, draft.actions + draft.refused)
    results, refused = results[: len(draft.actions)], results[len(draft.actions) :]
    if not all(result is not None and result.error for result in refused):
        return None
    for index, result in enumerate(results):
        should_fail = draft.error_first and index == 0
        if result is None or bool(result.error) != should_fail:
            return None
    writes = draft.family in WRITE_FAMILIES
    if (digest != domain.new_database().digest()) != writes:
        return None
    outputs = "\n".join(result.output for result in results)
    if not all(contains_fact(outputs, fact) for fact in draft.facts):
        return None
    return digest


def split_of(domain: str, owner: str) -> str:
    bucket = int(hashlib.sha256(f"{domain}:{owner}".encode()).hexdigest()[:8], 16) % 100
    return "test" if bucket < TEST_SHARE else "train"


def generate_tasks(domain: Domain, seed: int = 0) -> list[Task]:
    """All verified tasks of a domain, both splits, in a fixed order."""
    tasks: list[Task] = []
    counters: dict[str, int] = {}
    for draft in Generator(domain, seed).drafts() + action_drafts(Generator(domain, seed, stream="actions")):
        expected = verify(domain, draft)
        if expected is None:
            continue
        number = counters[draft.family] = counters.get(draft.family, 0) + 1
        tasks.append(
            Task(
                id=f"{domain.name}-{draft.family}-{number:04d}",
                split=split_of(domain.name, draft.owner),
                prompt=draft.prompt,
                subtask=f"{domain.name}/{draft.family}",
                meta={
                    "domain": domain.name,
                    "family": draft.family,
                    "owner": draft.owner,
                    "gold_actions": draft.actions,
                    "expected_hash": expected,
                    "required_facts": draft.facts,
                    "forbidden_actions": draft.forbidden,
                    "writes": draft.family in WRITE_FAMILIES,
                },
            )
        )
        if draft.fact_paths:
            tasks[-1].meta["fact_paths"] = draft.fact_paths
        if draft.refused:  # the forbidden request itself, shown to fail by the verification
            tasks[-1].meta["refused_actions"] = draft.refused
    return tasks
