"""Restaurant policy actions (restaurant/policy.md, "Cancel placed ticket", "Add tip to a ticket") and
their tasks. Tickets keep their state in `state` (not `status`), so the schema rules derive no write.

- cancel_ticket(ticket_ref, reason): only a 'placed' ticket; it becomes 'cancelled' and every 'payment'
  charge gets a 'refund' charge to the same instrument (the free-form reason is not stored);
- add_tip(ticket_ref, amount, instrument_ref): any ticket not cancelled, amount >= 0, the instrument one
  of the ticket's patron's saved instruments; appends a 'tip' charge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolorchestra.envs.toolscale.actions import existing, money, positive_amount
from toolorchestra.envs.toolscale.tasks import Draft, action, fact_text
from toolorchestra.envs.toolscale.tools import ToolFailure, ToolSpec, object_schema

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Database, Domain
    from toolorchestra.envs.toolscale.tasks import Generator

TICKETS, PATRONS = "service_tickets", "patron_registry"
ID = {"type": "string", "minLength": 1}
TIP_AMOUNTS = (50.0, 100.0, 150.0, 200.0)


def ticket(database: Database, ticket_ref: str) -> dict[str, Any]:
    return existing(database, TICKETS, ticket_ref, "ticket_ref")


def cancel_ticket(database: Database, arguments: dict[str, Any]) -> Any:
    ref = arguments["ticket_ref"]
    record = ticket(database, ref)
    if record.get("state") != "placed":
        raise ToolFailure(f"ticket {ref!r} is {record.get('state')}; only placed tickets can be cancelled")
    if not arguments["reason"].strip():
        raise ToolFailure("invalid argument reason: a non-empty reason is required")
    charges = record.get("charges") or []
    refunds = [{"kind": "refund", "total": c["total"], "instrument_ref": c["instrument_ref"]}
               for c in charges if c.get("kind") == "payment"]
    database.update(TICKETS, ref, "charges", [*charges, *refunds])
    database.update(TICKETS, ref, "state", "cancelled")
    return {"ticket_ref": ref, "state": "cancelled", "refunds": refunds}


def add_tip(database: Database, arguments: dict[str, Any]) -> Any:
    ref, instrument = arguments["ticket_ref"], arguments["instrument_ref"]
    amount = positive_amount(arguments, allow_zero=True)
    record = ticket(database, ref)
    if record.get("state") == "cancelled":
        raise ToolFailure(f"ticket {ref!r} is cancelled; a tip needs a ticket that is not cancelled")
    patron = database.get(PATRONS, record.get("guest_ref")) or {}
    if instrument not in (patron.get("saved_instruments") or {}):
        raise ToolFailure(f"instrument_ref {instrument!r} is not a saved instrument of the ticket's patron")
    tip = {"kind": "tip", "total": money(amount), "instrument_ref": instrument}
    database.update(TICKETS, ref, "charges", [*(record.get("charges") or []), tip])
    return {"ticket_ref": ref, "tip": tip}


def specs(domain: Domain) -> list[ToolSpec]:
    return [
        ToolSpec("cancel_ticket", "WRITE. Cancel a placed ticket; its payments are refunded to their instruments.",
                 object_schema({"ticket_ref": ID, "reason": {"type": "string", "minLength": 1}}), cancel_ticket,
                 writes=True, collection=TICKETS, key_argument="ticket_ref"),
        ToolSpec("add_tip", "WRITE. Add a tip (>= 0) to a ticket that is not cancelled, charged to a saved "
                 "instrument of the ticket's patron.",
                 object_schema({"ticket_ref": ID, "amount": {"type": "number", "minimum": 0}, "instrument_ref": ID}),
                 add_tip, writes=True, collection=TICKETS, key_argument="ticket_ref"),
    ]


def ticket_tasks(generator: Generator, owner: str, email: str, ref: str, record: dict[str, Any],
                 instruments: list[str]) -> list[Draft]:
    """Cancel (or a refusal when not placed) and, for half of the tickets, a tip."""
    auth = action("find_guest_id_by_email", email=email)
    read = action("get_ticket", ticket_ref=ref)
    reason = generator.rng.choice(["ordered by mistake", "plans changed", "taking too long"])
    cancel = action("cancel_ticket", ticket_ref=ref, reason=reason)
    request = f"Hi, my email is {email}. Please cancel my ticket {ref}; the reason: {reason}."
    if record.get("state") == "placed":
        drafts = [Draft("action_write", owner, request, [auth, read, cancel])]
    else:
        drafts = [Draft("action_refusal", owner, request, [auth, read], refused=[cancel],
                        forbidden=[{"name": "cancel_ticket", "argument": "ticket_ref", "value": ref}])]
    if instruments and record.get("state") != "cancelled" and generator.rng.random() < 0.5:
        amount, instrument = generator.rng.choice(TIP_AMOUNTS), generator.rng.choice(instruments)
        drafts.append(Draft("action_write", owner, f"Hi, my email is {email}. Please add a tip of {fact_text(amount)} "
                            f"to my ticket {ref}, charged to my saved instrument {instrument}.",
                            [auth, read, action("add_tip", ticket_ref=ref, amount=amount, instrument_ref=instrument)]))
    return drafts


def drafts(generator: Generator) -> list[Draft]:
    patrons, base = generator.shapes[PATRONS], generator.domain.base
    found: list[Draft] = []
    for guest, patron in base[PATRONS].items():
        email = generator.unique_email(patrons, guest)
        if not email:
            continue
        instruments = list(patron.get("saved_instruments") or {})
        for ref, record in base[TICKETS].items():
            if record.get("guest_ref") == guest:
                found += ticket_tasks(generator, f"{PATRONS}/{guest}", email, ref, record, instruments)
    return found
