"""Restaurant policy actions (restaurant/policy.md, "Cancel placed ticket", "Modify placed ticket", "Add tip to
a ticket") and their tasks. Tickets keep their state in `state` (not `status`), so the schema rules derive no
write. Every tool takes the ticket_ref; "saved instrument" means one of the ticket's patron's
`saved_instruments` (the tools have no session, so the ticket's owner stands in for the authenticated patron).

- cancel_ticket(ticket_ref, reason): only a 'placed' ticket; it becomes 'cancelled' and every 'payment'
  charge gets a 'refund' charge to the same instrument (the free-form reason is not stored);
- add_tip(ticket_ref, amount, instrument_ref): any ticket not cancelled, amount >= 0, a saved instrument;
  appends a 'tip' charge;
- modify_ticket_dropoff(ticket_ref, line_one, line_two, municipality, province, nation, postal_code): only a
  placed delivery ticket; all six fields are required, every one but line_two non-empty (the data hold
  addresses without a second line); replaces `dropoff`;
- modify_ticket_table(ticket_ref, zone, table_no, seat_count): only a placed dine-in ticket; zone and
  table_no non-empty, seat_count an integer >= 1; replaces `table_info`;
- modify_ticket_payment(ticket_ref, instrument_ref): only a placed ticket with exactly one 'payment' charge;
  the instrument saved and different from the one that paid; appends a 'payment' of the same total with the
  new instrument, then a 'refund' of it to the old one;
- modify_ticket_plates(ticket_ref, plate_refs, new_plate_refs, instrument_ref): only a placed ticket; both
  lists the same length, aligned by position, the old plates on the ticket as many times as listed
  (duplicates are identical plates ordered twice); each new plate another plate of the same dish as the
  line it replaces and served today; the instrument saved. The replaced lines take the new plate_ref and its
  menu cost; a positive total difference is a 'payment' to the instrument, a negative one a 'refund' of its
  size, none when the costs are equal.
A modification reads the ticket's state first, so every rule above starts with "only a placed ticket".

Tasks (patrons with a unique email, after the cancel and tip drafts so those keep their draws and numbers):
per ticket, a dropoff move to another patron's real address (delivery) or a move to another ticket's real
table (dine-in; for some also more seats): done when placed, refused for some tickets no longer placed; for
some placed tickets the other service mode's change (refused); for some a payment change (refused, see below);
a swap for another plate of the same dish where the menu has one, and for some a plate of another dish
(refused).

Left out: authentication by name + postal code (no such read is derived and the tasks authenticate by
email only, so the 62 patrons without a unique email get no action task); the confirmation step, "one user
per conversation" and transfer_to_human_agents (a tool cannot know what was confirmed or who talks). A plate
change rewrites only what the policy names (plate_ref and cost): the line's label and mods and the kitchen's
prep_batches stay as they were. The data limit the tasks: every patron has a single saved instrument, the one
every ticket was paid with, so a payment change is only ever refused (same or unsaved instrument, or a ticket
not placed); only two dishes offer a second plate and only one placed ticket orders one of them, so plate
changes are mostly refused (a plate of another dish); no plate is off today, so that rule is tested but never
asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolorchestra.envs.toolscale.actions.shared import address_of, existing, money, pick_entries, positive_amount
from toolorchestra.envs.toolscale.drafts import Draft, Drafter, action, fact_text
from toolorchestra.envs.toolscale.tools import ToolFailure, ToolSpec, writes_on

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Database, Domain
    from toolorchestra.envs.toolscale.tasks import Generator

TICKETS, PATRONS, MENU = "service_tickets", "patron_registry", "menu_board"
ID = {"type": "string", "minLength": 1}
TEXT = {"type": "string"}  # blank values are refused by the tools, with the rule that makes them wrong
PLATES = {"type": "array", "minItems": 1, "items": ID, "description": "plate_refs; repeat one for each plate"}
ADDRESS_FIELDS = ("line_one", "line_two", "municipality", "province", "nation", "postal_code")
OPTIONAL_ADDRESS_FIELDS = ("line_two",)  # an address may have no second line
TIP_AMOUNTS = (50.0, 100.0, 150.0, 200.0)
SEATS_ADDED = (1, 2)  # a growing party asks for this many more seats at the same table
WRONG_MODE_SHARE = 0.5  # of the placed tickets, the share asking for the other service mode's change
STATE_SHARE = 0.4  # of the tickets no longer placed, the share asking for a dropoff or table change anyway
PAYMENT_SHARE = 0.3  # of the tickets, the share asking to pay with another instrument
PLATE_SHARE = 0.3  # of the tickets, the share asking to swap a plate for one of another dish
SEAT_SHARE = 0.5  # of the placed dine-in tickets, the share also asking for more seats


# --- lookups and rules -----------------------------------------------------------------------------
def ticket(database: Database, ticket_ref: str) -> dict[str, Any]:
    return existing(database, TICKETS, ticket_ref, "ticket_ref")


def saved_instruments(database: Database, record: dict[str, Any]) -> dict[str, Any]:
    return (database.get(PATRONS, record.get("guest_ref") or "") or {}).get("saved_instruments") or {}


def require_saved(database: Database, record: dict[str, Any], instrument: str) -> None:
    if instrument not in saved_instruments(database, record):
        raise ToolFailure(f"instrument_ref {instrument!r} is not a saved instrument of the ticket's patron")


def placed_ticket(database: Database, ref: str, doing: str, mode: str | None = None) -> dict[str, Any]:
    """The ticket, which must be 'placed' (the policy's first check for every cancellation or modification) and
    of the service `mode` where one is given."""
    record = ticket(database, ref)
    if record.get("state") != "placed":
        raise ToolFailure(f"ticket {ref!r} is {record.get('state')}; only placed tickets can {doing}")
    if mode and record.get("service_mode") != mode:
        raise ToolFailure(
            f"ticket {record['ticket_ref']!r} is {record.get('service_mode')}; only {mode} tickets can {doing}"
        )
    return record


def payment_charges(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [charge for charge in record.get("charges") or [] if charge.get("kind") == "payment"]


def plate_of(database: Database, plate_ref: str) -> tuple[str, dict[str, Any]] | None:
    """(dish_ref, plate) of a plate on the menu, or None."""
    for dish_ref, dish in database.records(MENU):
        plate = (dish.get("selections") or {}).get(plate_ref)
        if isinstance(plate, dict):
            return dish_ref, plate
    return None


def ticket_lines(record: dict[str, Any], plate_refs: list[str]) -> list[int]:
    """The index of one line entry per listed plate (duplicates are identical plates ordered more than once)."""
    ticket, rule = f"ticket {record['ticket_ref']!r}", "the plates must be on the ticket"
    return pick_entries(record.get("line_entries") or [], "plate_ref", plate_refs, "plate_refs", ticket, rule)


def replacement(database: Database, entry: dict[str, Any], new_ref: str) -> dict[str, Any]:
    """The menu plate `new_ref` if it may replace the line `entry`: another plate of its dish, served today."""
    found = plate_of(database, new_ref)
    if found is None:
        raise ToolFailure(f"no plate with plate_ref {new_ref!r} on the menu")
    dish_ref, plate = found
    if dish_ref != entry.get("dish_ref"):
        raise ToolFailure(
            f"plate {new_ref!r} belongs to dish {dish_ref!r}, not to dish {entry.get('dish_ref')!r} of "
            f"plate {entry.get('plate_ref')!r}; a replacement must be a plate of the same dish"
        )
    if new_ref == entry.get("plate_ref"):
        raise ToolFailure(
            f"plate {new_ref!r} is the plate it would replace; a replacement must be another plate of the same dish"
        )
    if plate.get("served_today") is not True:
        raise ToolFailure(f"plate {new_ref!r} is not served today; a replacement must be available today")
    return plate


# --- tools -----------------------------------------------------------------------------------------
def cancel_ticket(database: Database, arguments: dict[str, Any]) -> Any:
    ref = arguments["ticket_ref"]
    record = placed_ticket(database, ref, "be cancelled")
    if not arguments["reason"].strip():
        raise ToolFailure("invalid argument reason: a non-empty reason is required")
    charges = record.get("charges") or []
    refunds = [
        {"kind": "refund", "total": c["total"], "instrument_ref": c["instrument_ref"]} for c in payment_charges(record)
    ]
    database.update(TICKETS, ref, "charges", [*charges, *refunds])
    database.update(TICKETS, ref, "state", "cancelled")
    return {"ticket_ref": ref, "state": "cancelled", "refunds": refunds}


def add_tip(database: Database, arguments: dict[str, Any]) -> Any:
    ref, instrument = arguments["ticket_ref"], arguments["instrument_ref"]
    amount = positive_amount(arguments, allow_zero=True)
    record = ticket(database, ref)
    if record.get("state") == "cancelled":
        raise ToolFailure(f"ticket {ref!r} is cancelled; a tip needs a ticket that is not cancelled")
    require_saved(database, record, instrument)
    tip = {"kind": "tip", "total": money(amount), "instrument_ref": instrument}
    database.update(TICKETS, ref, "charges", [*(record.get("charges") or []), tip])
    return {"ticket_ref": ref, "tip": tip}


def modify_dropoff(database: Database, arguments: dict[str, Any]) -> Any:
    ref = arguments["ticket_ref"]
    record = placed_ticket(database, ref, "change their dropoff address", "delivery")
    dropoff = address_of(arguments, ADDRESS_FIELDS, OPTIONAL_ADDRESS_FIELDS)
    database.update(TICKETS, ref, "dropoff", dropoff)
    return {"ticket_ref": ref, "old_dropoff": record.get("dropoff"), "dropoff": dropoff}


def modify_table(database: Database, arguments: dict[str, Any]) -> Any:
    ref = arguments["ticket_ref"]
    record = placed_ticket(database, ref, "change their table information", "dine_in")
    blank = [name for name in ("zone", "table_no") if not arguments[name].strip()]
    if blank:
        raise ToolFailure(f"invalid argument {blank[0]}: zone, table_no and seat_count are all required")
    # the schema's integer admits 4.0; the stored seat_count stays an int like the data's
    table = {
        "zone": arguments["zone"].strip(),
        "table_no": arguments["table_no"].strip(),
        "seat_count": int(arguments["seat_count"]),
    }
    database.update(TICKETS, ref, "table_info", table)
    return {"ticket_ref": ref, "old_table_info": record.get("table_info"), "table_info": table}


def modify_payment(database: Database, arguments: dict[str, Any]) -> Any:
    ref, new = arguments["ticket_ref"], arguments["instrument_ref"]
    record = placed_ticket(database, ref, "change their payment instrument")
    paid = payment_charges(record)
    if len(paid) != 1:
        raise ToolFailure(
            f"ticket {ref!r} has {len(paid)} payment charges; a payment instrument change needs exactly one"
        )
    require_saved(database, record, new)
    old = paid[0]
    if new == old.get("instrument_ref"):
        raise ToolFailure(
            f"instrument_ref {new!r} already pays for ticket {ref!r}; the new instrument must be "
            "different from the current one"
        )
    payment = {"kind": "payment", "total": old.get("total"), "instrument_ref": new}
    refund = {"kind": "refund", "total": old.get("total"), "instrument_ref": old.get("instrument_ref")}
    database.update(TICKETS, ref, "charges", [*(record.get("charges") or []), payment, refund])
    return {"ticket_ref": ref, "payment": payment, "refund": refund}


def modify_plates(database: Database, arguments: dict[str, Any]) -> Any:
    ref, instrument = arguments["ticket_ref"], arguments["instrument_ref"]
    old_refs, new_refs = arguments["plate_refs"], arguments["new_plate_refs"]
    record = placed_ticket(database, ref, "change their plates")
    if len(old_refs) != len(new_refs):
        raise ToolFailure(
            f"plate_refs has {len(old_refs)} plates and new_plate_refs {len(new_refs)}; they must be "
            "the same length, aligned by position"
        )
    require_saved(database, record, instrument)
    entries = [dict(entry) for entry in record.get("line_entries") or []]
    difference = 0.0
    for index, new_ref in zip(ticket_lines(record, old_refs), new_refs, strict=True):
        plate = replacement(database, entries[index], new_ref)
        cost = float(plate.get("cost") or 0)
        difference += cost - float(entries[index].get("cost") or 0)
        entries[index].update(plate_ref=new_ref, cost=cost)
    difference = money(difference)
    charge = None
    if difference:  # equal costs move no money, so no zero charge clutters the ticket
        charge = {
            "kind": "payment" if difference > 0 else "refund",
            "total": abs(difference),
            "instrument_ref": instrument,
        }
        database.update(TICKETS, ref, "charges", [*(record.get("charges") or []), charge])
    database.update(TICKETS, ref, "line_entries", entries)
    return {"ticket_ref": ref, "line_entries": entries, "difference": difference, "charge": charge}


def specs(domain: Domain) -> list[ToolSpec]:
    address, write = {name: TEXT for name in ADDRESS_FIELDS}, writes_on(TICKETS, "ticket_ref", {"ticket_ref": ID})
    return [
        write(
            "cancel_ticket",
            "Cancel a placed ticket; its payments are refunded to their instruments.",
            {"reason": {"type": "string", "minLength": 1}},
            cancel_ticket,
        ),
        write(
            "add_tip",
            "Add a tip (>= 0) to a ticket that is not cancelled, charged to a saved instrument of the ticket's patron.",
            {"amount": {"type": "number", "minimum": 0}, "instrument_ref": ID},
            add_tip,
        ),
        write(
            "modify_ticket_dropoff",
            "Replace the dropoff address of a placed delivery ticket (all fields; line_two may be empty).",
            address,
            modify_dropoff,
        ),
        write(
            "modify_ticket_table",
            "Replace the table information of a placed dine-in ticket.",
            {"zone": TEXT, "table_no": TEXT, "seat_count": {"type": "integer", "minimum": 1}},
            modify_table,
        ),
        write(
            "modify_ticket_payment",
            "Pay a placed ticket (exactly one payment) with another saved "
            "instrument of its patron: a new payment of the same total, a refund to the old instrument.",
            {"instrument_ref": ID},
            modify_payment,
        ),
        write(
            "modify_ticket_plates",
            "Replace plates of a placed ticket with other plates of the same "
            "dish served today (lists aligned by position); the cost difference is charged or refunded to a "
            "saved instrument of the ticket's patron.",
            {"plate_refs": PLATES, "new_plate_refs": PLATES, "instrument_ref": ID},
            modify_plates,
        ),
    ]


# --- tasks -----------------------------------------------------------------------------------------
def address_text(address: dict[str, str]) -> str:
    """Labelled, quoted fields: the values hold commas ("Carrer de la Pau, 15"), so a plain list would be
    ambiguous and the agent could not rebuild the exact address."""
    fields = [f"{name.replace('_', ' ')} '{address[name]}'" for name in ADDRESS_FIELDS if address.get(name)]
    return ", ".join(fields) + ("" if address.get("line_two") else " (no second address line)")


def table_text(table: dict[str, Any]) -> str:
    return f"zone '{table['zone']}', table '{table['table_no']}', {table['seat_count']} seats"


class TicketDrafter(Drafter):
    """Drafts for one ticket of a patron with a unique email: its cancellation and tip (`ticket_tasks`), and
    the "Modify placed ticket" actions (`tasks`); done where the policy allows them, else refused (gold: the
    reads that show why, the failing call in `refused`)."""

    def __init__(self, generator: Generator, guest: str, email: str, ref: str, record: dict[str, Any]) -> None:
        self.rng, self.base, self.ref, self.record = generator.rng, generator.domain.base, ref, record
        super().__init__(f"{PATRONS}/{guest}", f"Hi, my email is {email}.")
        self.patron = self.base[PATRONS][guest]
        self.reads = [action("find_guest_id_by_email", email=email), action("get_ticket", ticket_ref=ref)]
        self.placed = record.get("state") == "placed"

    def ticket_tasks(self) -> list[Draft]:
        """Cancel (or a refusal when not placed) and, for half of the tickets, a tip."""
        reason = self.rng.choice(["ordered by mistake", "plans changed", "taking too long"])
        cancel = action("cancel_ticket", ticket_ref=self.ref, reason=reason)
        request = f"Please cancel my ticket {self.ref}; the reason: {reason}."
        drafts = [self.decide(self.placed, request, self.reads, cancel, "ticket_ref")]
        instruments = list(self.patron.get("saved_instruments") or {})
        if instruments and self.record.get("state") != "cancelled" and self.rng.random() < 0.5:
            amount, instrument = self.rng.choice(TIP_AMOUNTS), self.rng.choice(instruments)
            tip = action("add_tip", ticket_ref=self.ref, amount=amount, instrument_ref=instrument)
            request = (
                f"Please add a tip of {fact_text(amount)} to my ticket {self.ref}, "
                f"charged to my saved instrument {instrument}."
            )
            drafts.append(self.write(request, [*self.reads, tip]))
        return drafts

    def tasks(self) -> list[Draft]:
        mode, drafts = self.record.get("service_mode"), []
        if self.placed or self.rng.random() < STATE_SHARE:  # the ticket's own kind of detail change
            if mode == "delivery" or (mode != "dine_in" and self.rng.random() < 0.5):
                drafts += self.dropoff_tasks()
            else:
                drafts += self.table_tasks()
        if self.placed and mode != "takeout" and self.rng.random() < WRONG_MODE_SHARE:
            drafts += self.table_tasks() if mode == "delivery" else self.dropoff_tasks()
        if self.rng.random() < PAYMENT_SHARE:
            drafts += self.payment_tasks()
        drafts += self.plate_tasks()
        return drafts

    def allowed(self, mode: str) -> bool:
        return self.placed and self.record.get("service_mode") == mode

    def dropoff_tasks(self) -> list[Draft]:
        """A move to another patron's real address, in the same nation where one exists."""
        current = self.record.get("dropoff") or {}
        locations = [
            patron["location"]
            for patron in self.base[PATRONS].values()
            if isinstance(patron.get("location"), dict)
            and patron["location"] != current
            and all(isinstance(patron["location"].get(name), str) for name in ADDRESS_FIELDS)
        ]
        if not locations:
            return []
        near = [loc for loc in locations if loc.get("nation") == (current or self.patron["location"]).get("nation")]
        chosen = self.rng.choice(near or locations)
        new = {name: chosen[name] for name in ADDRESS_FIELDS}
        request = f"Please deliver my ticket {self.ref} to this address instead: {address_text(new)}."
        call = action("modify_ticket_dropoff", ticket_ref=self.ref, **new)
        return [self.decide(self.allowed("delivery"), request, self.reads, call, "ticket_ref")]

    def table_tasks(self) -> list[Draft]:
        """A move to another real table (a table of another ticket) and, for some dine-in tickets, more seats."""
        current = self.record.get("table_info")
        tables = sorted(
            {
                (t["zone"], t["table_no"], t["seat_count"])
                for t in (other.get("table_info") for other in self.base[TICKETS].values())
                if isinstance(t, dict)
                and (not current or (t["zone"], t["table_no"]) != (current["zone"], current["table_no"]))
            }
        )
        if not tables:
            return []
        zone, table_no, seats = self.rng.choice(tables)
        new = {"zone": zone, "table_no": table_no, "seat_count": seats}
        request = f"For my ticket {self.ref}, please move us to {table_text(new)}."
        call = action("modify_ticket_table", ticket_ref=self.ref, **new)
        drafts = [self.decide(self.allowed("dine_in"), request, self.reads, call, "ticket_ref")]
        if current and self.allowed("dine_in") and self.rng.random() < SEAT_SHARE:
            more = {**current, "seat_count": current["seat_count"] + self.rng.choice(SEATS_ADDED)}
            drafts.append(
                self.write(
                    f"More friends are joining: for my ticket {self.ref}, please keep our table "
                    f"but make it {table_text(more)}.",
                    [*self.reads, action("modify_ticket_table", ticket_ref=self.ref, **more)],
                )
            )
        return drafts

    def payment_tasks(self) -> list[Draft]:
        """Every patron has one saved instrument, the one that paid: the user names it again or another
        patron's instrument (not saved); both are refused, as is any change of a ticket not placed."""
        paid = (payment_charges(self.record) or [{}])[0].get("instrument_ref")
        others = sorted(
            ref
            for guest, patron in self.base[PATRONS].items()
            if guest != self.record.get("guest_ref")
            for ref in patron.get("saved_instruments") or {}
        )
        if not paid and not others:
            return []
        if paid and (not others or self.rng.random() < 0.5):
            request = f"Please move the payment of my ticket {self.ref} to my saved instrument {paid}."
            new = paid
        else:
            new = self.rng.choice(others)
            request = f"Please pay my ticket {self.ref} with my other card instead, instrument {new}."
        reads = [*self.reads, action("get_guest", guest_ref=self.record["guest_ref"])]
        call = action("modify_ticket_payment", ticket_ref=self.ref, instrument_ref=new)
        return [self.refuse(request, reads, call, "ticket_ref")]

    def plate_tasks(self) -> list[Draft]:
        """A swap for another plate of the same dish where the menu has one (done when placed), and for some a
        swap for a plate of another dish (refused)."""
        entries = self.record.get("line_entries") or []
        menu, instrument = self.base[MENU], next(iter(self.patron.get("saved_instruments") or {}), None)
        if not entries or instrument is None:
            return []
        drafts = []
        swaps = [
            (entry, plate_ref)
            for entry in entries
            for plate_ref, plate in (menu.get(entry.get("dish_ref"), {}).get("selections") or {}).items()
            if plate_ref != entry.get("plate_ref") and plate.get("served_today") is True
        ]
        if swaps:
            entry, new = self.rng.choice(swaps)
            drafts.append(self.plate_draft(entry, new, instrument, self.placed))
        if self.rng.random() < PLATE_SHARE:
            entry = self.rng.choice(entries)
            others = sorted(
                plate_ref
                for dish_ref, dish in menu.items()
                if dish_ref != entry.get("dish_ref")
                for plate_ref, plate in (dish.get("selections") or {}).items()
                if plate.get("served_today") is True
            )
            if others:
                drafts.append(self.plate_draft(entry, self.rng.choice(others), instrument, False))
        return drafts

    def plate_draft(self, entry: dict[str, Any], new: str, instrument: str, allowed: bool) -> Draft:
        old = entry["plate_ref"]
        request = (
            f"On my ticket {self.ref}, please replace plate {old} ({entry.get('label')}) with plate {new}; "
            f"settle any price difference with my saved instrument {instrument}."
        )
        reads = [*self.reads, action("get_dish", dish_ref=entry["dish_ref"])]
        call = action(
            "modify_ticket_plates",
            ticket_ref=self.ref,
            plate_refs=[old],
            new_plate_refs=[new],
            instrument_ref=instrument,
        )
        return self.decide(allowed, request, reads, call, "ticket_ref")


def drafts(generator: Generator) -> list[Draft]:
    """Per ticket of a patron with a unique email: a cancellation and some tips, then (after all of those, so
    their random draws and numbering stay as they were) the ticket modifications."""
    drafters = [
        TicketDrafter(generator, guest, email, ref, record)
        for guest, _, email in generator.by_email(PATRONS)
        for ref, record in generator.domain.base[TICKETS].items()
        if record.get("guest_ref") == guest
    ]
    found = [draft for drafter in drafters for draft in drafter.ticket_tasks()]
    return found + [draft for drafter in drafters for draft in drafter.tasks()]
