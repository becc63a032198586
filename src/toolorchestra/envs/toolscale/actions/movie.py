"""Movie theater policy actions (movie/policy.md, "Browse and Price", "Book tickets", "Modify booking
(seats only)", "Cancel booking", "Refunds") and the tasks that use them. Shows live inside the theaters
(`dates.<date>.shows`), so no schema rule derives any of this.

Reads: get_seat_availability(show_id) (seats of the show's auditorium: available, booked, wheelchair
accessible) and price_preview(theater_id, show_id, seats, [concessions]) (the exact breakdown).
Pricing: a seat costs the show's `price_schema[ticket_type]`, its per-ticket convenience fee and tax at the
theater's `tax_rate_percent` (rounded to the cent); concessions pay tax too; the theater's booking fee is
added once per booking.

Writes:
- create_booking: the show is in the theater's schedule and scheduled; seats exist in its auditorium, are
  distinct and not held by another confirmed or pending booking of the show; payments sum exactly to the
  grand total. Creates a confirmed booking (key from `new_key`) with e-tickets per seat;
- update_booking_seats(booking_id, seats, [payment]): the booking confirmed, its show scheduled, seats
  exist and new ones are available; a higher total needs one payment of exactly the difference, a lower
  one gets a refund entry (negative amount) to the first payment's method; kept seats keep their stored
  prices, new ones are priced as above and the totals move by the difference;
- cancel_booking(booking_id): a confirmed or pending booking whose show is scheduled or canceled (not
  completed); status canceled, canceled_at set, a refund entry of the full amount paid, amount_paid 0.

Left out: the wheelchair rule ("do not assign accessible seats unless requested": a tool cannot know what
was requested; the tasks never ask for such seats), promotions (not supported by the tools, per the
policy), list_shows and the confirmation step; delivery tickets are not reissued on seat changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from toolorchestra.envs.toolscale.actions.shared import existing, money, new_key
from toolorchestra.envs.toolscale.drafts import Draft, Drafter, action
from toolorchestra.envs.toolscale.tools import TEXT, ToolFailure, ToolSpec, object_schema, write_spec, writes_on

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Database, Domain
    from toolorchestra.envs.toolscale.tasks import Generator

BOOKINGS, THEATERS = "bookings", "theaters"
NOW = "24-05-15-15-00"  # the policy's clock (2024-05-15 15:00 EST) in the data's YY-MM-DD-HH-MM format
TICKET_TYPES = ("adult", "child", "senior")
HOLDING = ("confirmed", "pending")  # bookings whose seats are taken
SEATS_SCHEMA = {
    "type": "array",
    "minItems": 1,
    "items": object_schema({"seat_id": TEXT, "ticket_type": {"type": "string", "enum": list(TICKET_TYPES)}}),
}
CONCESSIONS_SCHEMA = {
    "type": "array",
    "items": object_schema(
        {
            "item_id": TEXT,
            "name": TEXT,
            "size": TEXT,
            "quantity": {"type": "integer", "minimum": 1},
            "price_each": {"type": "number", "minimum": 0},
        }
    ),
}
PAYMENT_SCHEMA = object_schema(
    {
        "source": {"type": "string", "enum": ["card", "wallet", "cash", "gift_card"]},
        "payment_method_id": TEXT,
        "amount": {"type": "number", "exclusiveMinimum": 0},
    }
)
CUSTOMER_SCHEMA = object_schema(
    {"first_name": TEXT, "last_name": TEXT, "email": TEXT, "phone": TEXT}, {"loyalty_id": TEXT}
)


# --- lookups ---------------------------------------------------------------------------------------
def all_shows(database: Database) -> Iterator[tuple[dict[str, Any], str, dict[str, Any]]]:
    """(theater, date, show) of every show in the theaters' schedules."""
    return (
        (theater, date, show)
        for _, theater in database.records(THEATERS)
        for date, day in (theater.get("dates") or {}).items()
        for show in day.get("shows") or []
    )


def find_show(database: Database, show_id: str) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """(theater, date, show) of a show in any theater's schedule."""
    found = next((entry for entry in all_shows(database) if entry[2].get("show_id") == show_id), None)
    if found is None:
        raise ToolFailure(f"no show with show_id {show_id!r}")
    return found


def theater_show(database: Database, theater_id: str, show_id: str) -> tuple[dict[str, Any], str, dict[str, Any]]:
    if database.get(THEATERS, theater_id) is None:
        raise ToolFailure(f"no theater with theater_id {theater_id!r}")
    theater, date, show = find_show(database, show_id)
    if theater["theater_id"] != theater_id:
        raise ToolFailure(f"show {show_id!r} is not in the schedule of theater {theater_id!r}")
    return theater, date, show


def seat_map(theater: dict[str, Any], show: dict[str, Any]) -> dict[str, dict[str, Any]]:
    auditorium = (theater.get("auditoriums") or {}).get(show.get("auditorium_id")) or {}
    rows = (auditorium.get("seat_map") or {}).get("rows") or {}
    return {seat["seat_id"]: seat for row in rows.values() for seat in row}


def booked_seats(database: Database, show_id: str, except_booking: str | None = None) -> set[str]:
    return {
        seat["seat_id"]
        for key, booking in database.records(BOOKINGS)
        if key != except_booking and booking.get("show_id") == show_id and booking.get("status") in HOLDING
        for seat in booking.get("seats") or []
    }


def booking(database: Database, booking_id: str) -> dict[str, Any]:
    return existing(database, BOOKINGS, booking_id, "booking_id")


# --- rules -----------------------------------------------------------------------------------------
def require_scheduled(show: dict[str, Any], doing: str) -> None:
    if show.get("status") != "scheduled":
        raise ToolFailure(f"show {show['show_id']!r} is {show.get('status')}; only scheduled shows allow {doing}")


def require_seats(
    database: Database,
    theater: dict[str, Any],
    show: dict[str, Any],
    seats: list[dict[str, Any]],
    held: frozenset[str] | set[str] = frozenset(),
    booking_id: str | None = None,
) -> None:
    """Seats distinct, in the show's auditorium, and (unless already held by this booking) available."""
    ids = [seat["seat_id"] for seat in seats]
    if len(set(ids)) != len(ids):
        raise ToolFailure("invalid argument seats: a seat_id is listed twice")
    known = seat_map(theater, show)
    missing = [seat for seat in ids if seat not in known]
    if missing:
        raise ToolFailure(f"seat {missing[0]!r} does not exist in auditorium {show.get('auditorium_id')!r}")
    taken = sorted((set(ids) - held) & booked_seats(database, show["show_id"], booking_id))
    if taken:
        raise ToolFailure(f"seat {taken[0]!r} is not available for show {show['show_id']!r} (already booked)")


def seat_line(theater: dict[str, Any], show: dict[str, Any], seat: dict[str, Any]) -> dict[str, Any]:
    schema, rules = show.get("price_schema") or {}, theater.get("pricing_rules") or {}
    price = float(schema.get(seat["ticket_type"], rules.get("base", {}).get(seat["ticket_type"], 0.0)))
    fee = float((schema.get("fees") or {}).get("convenience_fee", (rules.get("fees") or {}).get("convenience_fee", 0)))
    tax = money(price * float(rules.get("tax_rate_percent", 0)) / 100)
    return {
        "seat_id": seat["seat_id"],
        "ticket_type": seat["ticket_type"],
        "price": price,
        "convenience_fee": fee,
        "tax": tax,
    }


def concession_line(theater: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    rate = float((theater.get("pricing_rules") or {}).get("tax_rate_percent", 0)) / 100
    tax_each = money(float(item["price_each"]) * rate)
    return {
        **item,
        "price_each": float(item["price_each"]),
        "tax_each": tax_each,
        "total": money(item["quantity"] * (float(item["price_each"]) + tax_each)),
    }


def totals(theater: dict[str, Any], seats: list[dict[str, Any]], concessions: list[dict[str, Any]]) -> dict[str, Any]:
    tickets = money(sum(seat["price"] for seat in seats))
    snacks = money(float(sum(item["quantity"] * item["price_each"] for item in concessions)))
    booking_fee = float(((theater.get("pricing_rules") or {}).get("fees") or {}).get("booking_fee", 0))
    fees = money(sum(seat["convenience_fee"] for seat in seats) + booking_fee)
    tax = money(sum(seat["tax"] for seat in seats) + sum(item["quantity"] * item["tax_each"] for item in concessions))
    return {
        "tickets_subtotal": tickets,
        "concessions_subtotal": snacks,
        "fees_total": fees,
        "tax_total": tax,
        "grand_total": money(tickets + snacks + fees + tax),
        "ticket_count": len(seats),
    }


def seat_cost(seat: dict[str, Any]) -> float:
    return float(seat["price"]) + float(seat["convenience_fee"]) + float(seat["tax"])


def reseat(
    theater: dict[str, Any], show: dict[str, Any], old: dict[str, dict[str, Any]], seats: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], float]:
    """The seat lines of a booking moved from its `old` lines (by seat_id) to `seats`: a kept seat of the same
    ticket type keeps its stored prices, others are priced now; and the cost difference."""
    lines = [
        old[seat["seat_id"]]
        if old.get(seat["seat_id"], {}).get("ticket_type") == seat["ticket_type"]
        else seat_line(theater, show, seat)
        for seat in seats
    ]
    return lines, money(sum(map(seat_cost, lines)) - sum(map(seat_cost, old.values())))


def method_of(payment: dict[str, Any]) -> dict[str, Any]:
    """The payment method a payment argument names (its source and payment_method_id)."""
    return {name: payment[name] for name in ("source", "payment_method_id")}


def payment_entry(payment_id: str, amount: float, method: dict[str, Any]) -> dict[str, Any]:
    return {"payment_id": payment_id, "amount": money(amount), "method": method, "created_at": NOW}


# --- tools -----------------------------------------------------------------------------------------
def get_seat_availability(database: Database, arguments: dict[str, Any]) -> Any:
    theater, _, show = find_show(database, arguments["show_id"])
    seats, booked = seat_map(theater, show), booked_seats(database, arguments["show_id"])
    return {
        "show_id": arguments["show_id"],
        "status": show.get("status"),
        "available": [seat for seat in seats if seat not in booked],
        "booked": sorted(booked & set(seats)),
        "wheelchair_accessible": [key for key, seat in seats.items() if seat.get("wheelchair_accessible")],
    }


def price_preview(database: Database, arguments: dict[str, Any]) -> Any:
    theater, _, show = theater_show(database, arguments["theater_id"], arguments["show_id"])
    require_seats(database, theater, show, arguments["seats"])
    seats = [seat_line(theater, show, seat) for seat in arguments["seats"]]
    concessions = [concession_line(theater, item) for item in arguments.get("concessions") or []]
    return {"seats": seats, "concessions": concessions, **totals(theater, seats, concessions)}


def ticket_items(booking_id: str, count: int) -> list[dict[str, Any]]:
    return [
        {
            "ticket_id": f"{booking_id}-T{i}",
            "barcode": str(int(hashlib.sha256(f"{booking_id}:{i}".encode()).hexdigest(), 16))[:12],
        }
        for i in range(1, count + 1)
    ]


def create_booking(database: Database, arguments: dict[str, Any]) -> Any:
    theater, date, show = theater_show(database, arguments["theater_id"], arguments["show_id"])
    require_scheduled(show, "booking")
    require_seats(database, theater, show, arguments["seats"])
    seats = [seat_line(theater, show, seat) for seat in arguments["seats"]]
    concessions = [concession_line(theater, item) for item in arguments.get("concessions") or []]
    summary = totals(theater, seats, concessions)
    paid = money(sum(payment["amount"] for payment in arguments["payments"]))
    if paid != summary["grand_total"]:
        raise ToolFailure(f"payments sum to {paid}; they must equal the grand total {summary['grand_total']} exactly")
    key = new_key(database, BOOKINGS)
    history = [
        payment_entry(f"{key}-P{i}", payment["amount"], method_of(payment))
        for i, payment in enumerate(arguments["payments"], start=1)
    ]
    summary.pop("ticket_count")
    record = {
        "booking_id": key,
        "theater_id": theater["theater_id"],
        "movie_id": show.get("movie_id"),
        "show_id": show["show_id"],
        "date": date,
        "start_time_local": show.get("start_time_local"),
        "status": "confirmed",
        "created_at": NOW,
        "canceled_at": None,
        "customer": {
            "name": {
                "first_name": arguments["customer"]["first_name"],
                "last_name": arguments["customer"]["last_name"],
            },
            "email": arguments["customer"]["email"],
            "phone": arguments["customer"]["phone"],
            "loyalty_id": arguments["customer"].get("loyalty_id"),
        },
        "seats": seats,
        "concessions": concessions,
        "promotions_applied": [],
        "payment_history": history,
        "totals": {**summary, "amount_paid": paid, "amount_due": 0.0},
        "delivery": {"method": arguments["delivery_method"], "tickets": ticket_items(key, len(seats))},
        "special_requests": arguments.get("special_requests"),
    }
    database.create(BOOKINGS, key, record)
    return {"booking_id": key, "status": "confirmed", "totals": record["totals"], "delivery": record["delivery"]}


def update_booking_seats(database: Database, arguments: dict[str, Any]) -> Any:
    booking_id = arguments["booking_id"]
    record = booking(database, booking_id)
    if record.get("status") != "confirmed":
        raise ToolFailure(f"booking {booking_id!r} is {record.get('status')}; only confirmed bookings can be modified")
    theater, _, show = find_show(database, record["show_id"])
    require_scheduled(show, "seat updates")
    old = {seat["seat_id"]: seat for seat in record.get("seats") or []}
    require_seats(database, theater, show, arguments["seats"], set(old), booking_id)
    seats, delta = reseat(theater, show, old, arguments["seats"])
    if seats == record.get("seats"):
        raise ToolFailure("the new seat list is the same as the booking's current seats")
    history, payment = list(record.get("payment_history") or []), arguments.get("payment")
    if delta > 0 and (payment is None or money(payment["amount"]) != delta):
        raise ToolFailure(f"the new total is higher by {delta}: one additional payment of exactly {delta} is required")
    if delta <= 0 and payment is not None:
        raise ToolFailure("no additional payment: the new total is not higher (a decrease is refunded)")
    entry_id = f"{booking_id}-P{len(history) + 1}"
    if payment is not None:
        history.append(payment_entry(entry_id, delta, method_of(payment)))
    elif delta < 0:
        history.append(payment_entry(entry_id, delta, history[0]["method"] if history else {"source": "cash"}))
    old_totals = record.get("totals") or {}
    parts = {"tickets_subtotal": "price", "fees_total": "convenience_fee", "tax_total": "tax"}  # total -> seat field
    new_totals = {
        **old_totals,
        **{
            total: money(old_totals.get(total, 0) + sum(s[part] for s in seats) - sum(s[part] for s in old.values()))
            for total, part in parts.items()
        },
        "grand_total": money(old_totals.get("grand_total", 0) + delta),
        "amount_paid": money(old_totals.get("amount_paid", 0) + delta),
    }
    database.update(BOOKINGS, booking_id, "seats", seats)
    database.update(BOOKINGS, booking_id, "payment_history", history)
    database.update(BOOKINGS, booking_id, "totals", new_totals)
    return {
        "booking_id": booking_id,
        "seats": seats,
        "difference": delta,
        "totals": new_totals,
        "payment_history": history,
    }


def cancel_booking(database: Database, arguments: dict[str, Any]) -> Any:
    booking_id = arguments["booking_id"]
    record = booking(database, booking_id)
    if record.get("status") not in HOLDING:
        raise ToolFailure(
            f"booking {booking_id!r} is {record.get('status')}; only confirmed or pending bookings can be canceled"
        )
    _, _, show = find_show(database, record["show_id"])
    if show.get("status") == "completed":
        raise ToolFailure(f"show {show['show_id']!r} is completed; a booking for a completed show cannot be canceled")
    history, paid = list(record.get("payment_history") or []), float((record.get("totals") or {}).get("amount_paid", 0))
    refund = None
    if paid > 0:
        refund = payment_entry(
            f"{booking_id}-P{len(history) + 1}", -paid, history[0]["method"] if history else {"source": "cash"}
        )
        history.append(refund)
    database.update(BOOKINGS, booking_id, "payment_history", history)
    database.update(
        BOOKINGS, booking_id, "totals", {**(record.get("totals") or {}), "amount_paid": 0.0, "amount_due": 0.0}
    )
    database.update(BOOKINGS, booking_id, "canceled_at", NOW)
    final = database.update(BOOKINGS, booking_id, "status", "canceled")
    return {"booking_id": booking_id, "status": "canceled", "refund": refund, "totals": final["totals"]}


def specs(domain: Domain) -> list[ToolSpec]:
    write = writes_on(BOOKINGS, "booking_id", {"booking_id": TEXT})
    return [
        ToolSpec(
            "get_seat_availability",
            "Seats of a show's auditorium: available, booked, wheelchair accessible.",
            object_schema({"show_id": TEXT}),
            get_seat_availability,
            collection=THEATERS,
        ),
        ToolSpec(
            "price_preview",
            "Exact price breakdown for seats (seat_id, ticket_type) and optional concessions "
            "of a show, with the grand total to pay.",
            object_schema(
                {"theater_id": TEXT, "show_id": TEXT, "seats": SEATS_SCHEMA}, {"concessions": CONCESSIONS_SCHEMA}
            ),
            price_preview,
            collection=THEATERS,
        ),
        write_spec(
            "create_booking",
            "Book available seats of a scheduled show; payments must sum exactly to the grand total of price_preview.",
            object_schema(
                {
                    "theater_id": TEXT,
                    "show_id": TEXT,
                    "seats": SEATS_SCHEMA,
                    "customer": CUSTOMER_SCHEMA,
                    "delivery_method": {"type": "string", "enum": ["e-ticket", "box-office", "kiosk"]},
                    "payments": {"type": "array", "minItems": 1, "items": PAYMENT_SCHEMA},
                },
                {"concessions": CONCESSIONS_SCHEMA, "special_requests": TEXT},
            ),
            create_booking,
            BOOKINGS,
            "show_id",
        ),
        write(
            "update_booking_seats",
            "Replace the seats of a confirmed booking (scheduled show); a higher "
            "total needs one payment of exactly the difference, a lower one is refunded.",
            {"seats": SEATS_SCHEMA},
            update_booking_seats,
            {"payment": PAYMENT_SCHEMA},
        ),
        write(
            "cancel_booking",
            "Cancel a confirmed or pending booking of a show that is not completed; the full amount paid is refunded.",
            {},
            cancel_booking,
        ),
    ]


# --- tasks -----------------------------------------------------------------------------------------
def seats_text(seats: list[dict[str, Any]]) -> str:
    return ", ".join(f"{seat['seat_id']} ({seat['ticket_type']})" for seat in seats)


class MovieDrafter(Drafter):
    """Drafts for one customer (a booking whose email is unique): seat changes, a cancellation, a new booking."""

    def __init__(self, generator: Generator, booking_id: str, record: dict[str, Any], email: str) -> None:
        self.gen, self.rng, self.booking_id, self.record = generator, generator.rng, booking_id, record
        name = record["customer"]["name"]
        super().__init__(f"{BOOKINGS}/{booking_id}", f"Hi, I'm {name['first_name']} {name['last_name']} ({email}).")
        self.database = generator.domain.new_database()  # read-only: availability and prices of the base

    def method(self) -> dict[str, Any]:
        history = self.record.get("payment_history") or []
        return history[0]["method"] if history else {"source": "card", "payment_method_id": "CARD-" + self.booking_id}

    def free_seats(self, show_id: str) -> list[str]:
        """The show's available seats but the wheelchair accessible ones (the tasks never ask for those)."""
        seats = get_seat_availability(self.database, {"show_id": show_id})
        return [seat for seat in seats["available"] if seat not in seats["wheelchair_accessible"]]

    def cancel_task(self) -> list[Draft]:
        call = action("cancel_booking", booking_id=self.booking_id)
        request = f"Please cancel my booking {self.booking_id} with a full refund."
        reads = [action("get_booking", booking_id=self.booking_id)]
        return [self.decide(self.record.get("status") in HOLDING, request, reads, call, "booking_id")]

    def seat_tasks(self) -> list[Draft]:
        show_id, seats = self.record["show_id"], list(self.record.get("seats") or [])
        if not seats:
            return []
        free = self.free_seats(show_id)
        reads = [action("get_booking", booking_id=self.booking_id), action("get_seat_availability", show_id=show_id)]
        drafts = []
        if free:  # move one seat to a free one, keeping its ticket type
            index = self.rng.randrange(len(seats))
            new = [{"seat_id": s["seat_id"], "ticket_type": s["ticket_type"]} for s in seats]
            new[index] = {"seat_id": self.rng.choice(free), "ticket_type": seats[index]["ticket_type"]}
            drafts.append(
                self.seat_change(
                    f"Please move my seat {seats[index]['seat_id']} to {new[index]['seat_id']}"
                    f"; my seats should then be {seats_text(new)}.",
                    new,
                    reads,
                )
            )
        if len(seats) > 1:  # drop the last ticket: a refund
            new = [{"seat_id": s["seat_id"], "ticket_type": s["ticket_type"]} for s in seats[:-1]]
            drafts.append(
                self.seat_change(
                    f"Please remove seat {seats[-1]['seat_id']} from my booking; keep {seats_text(new)}.", new, reads
                )
            )
        index = self.rng.randrange(len(seats))  # change one ticket's type: a payment or a refund
        kind = "adult" if seats[index]["ticket_type"] != "adult" else self.rng.choice(["child", "senior"])
        new = [{"seat_id": s["seat_id"], "ticket_type": s["ticket_type"]} for s in seats]
        new[index] = {"seat_id": seats[index]["seat_id"], "ticket_type": kind}
        drafts.append(
            self.seat_change(
                f"Please make the ticket for seat {seats[index]['seat_id']} a {kind} ticket; "
                f"my seats should then be {seats_text(new)}.",
                new,
                reads,
            )
        )
        taken = sorted(booked_seats(self.database, show_id, self.booking_id))
        if taken and self.rng.random() < 0.5:
            new = [{"seat_id": s["seat_id"], "ticket_type": s["ticket_type"]} for s in seats]
            new[0] = {"seat_id": self.rng.choice(taken), "ticket_type": seats[0]["ticket_type"]}
            call = action("update_booking_seats", booking_id=self.booking_id, seats=new)
            request = f"Please change my booking {self.booking_id} to the seats {seats_text(new)}."
            drafts.append(self.refuse(request, reads, call, "booking_id"))
        return drafts

    def seat_change(self, request: str, new: list[dict[str, Any]], reads: list[dict[str, Any]]) -> Draft:
        """A write when the booking is confirmed (paying the exact difference when it costs more), else a refusal."""
        prompt = f"For my booking {self.booking_id}: {request}"
        call = action("update_booking_seats", booking_id=self.booking_id, seats=new)
        if self.record.get("status") != "confirmed":
            return self.refuse(prompt, reads, call, "booking_id")
        theater, _, show = find_show(self.database, self.record["show_id"])
        _, delta = reseat(theater, show, {s["seat_id"]: s for s in self.record["seats"]}, new)
        if delta > 0:
            method = self.method()
            call["arguments"]["payment"] = {**method_of(method), "amount": delta}
            prompt += f" Pay any difference with my {method['source']} {method['payment_method_id']}."
        return self.write(prompt, [*reads, call])

    def booking_task(self, shows: list[tuple[dict[str, Any], str, dict[str, Any]]]) -> list[Draft]:
        """A new booking for another show: free seats (a write) or, for some, a booked seat (a refusal)."""
        theater, date, show = self.rng.choice(shows)
        free = self.free_seats(show["show_id"])
        taken = sorted(booked_seats(self.database, show["show_id"]))
        count = self.rng.choice([1, 2])
        if len(free) < count:
            return []
        chosen = self.rng.sample(free, count)
        refuse = bool(taken) and self.rng.random() < 0.4
        if refuse:
            chosen[0] = self.rng.choice(taken)
        seats = [{"seat_id": seat, "ticket_type": self.rng.choice(TICKET_TYPES)} for seat in chosen]
        customer = self.record["customer"]
        who = {
            "first_name": customer["name"]["first_name"],
            "last_name": customer["name"]["last_name"],
            "email": customer["email"],
            "phone": customer["phone"],
        }
        delivery, method = self.rng.choice(["e-ticket", "box-office", "kiosk"]), self.method()
        request = (
            f"Please book show {show['show_id']} at theater {theater['theater_id']} on {date}: seats "
            f"{seats_text(seats)}, {delivery} delivery, phone {customer['phone']}; pay the full total with my "
            f"{method['source']} {method['payment_method_id']}."
        )
        preview = action("price_preview", theater_id=theater["theater_id"], show_id=show["show_id"], seats=seats)
        reads = [action("get_seat_availability", show_id=show["show_id"])]
        grand = totals(theater, [seat_line(theater, show, s) for s in seats], [])["grand_total"]
        call = action(
            "create_booking",
            theater_id=theater["theater_id"],
            show_id=show["show_id"],
            seats=seats,
            customer=who,
            delivery_method=delivery,
            payments=[{**method_of(method), "amount": grand}],
        )
        if refuse:
            return [self.refuse(request, reads, call, "show_id")]
        return [self.write(request, [*reads, preview, call])]


def drafts(generator: Generator) -> list[Draft]:
    """Per customer with a unique email: a cancellation, seat changes (move, drop one, change a ticket type,
    a booked seat refused)
    and two new bookings (some asking for a booked seat, refused)."""
    shows = [entry for entry in all_shows(generator.domain.new_database()) if entry[2].get("status") == "scheduled"]
    found: list[Draft] = []
    for booking_id, record, email in generator.by_email(BOOKINGS):
        drafter = MovieDrafter(generator, booking_id, record, email)
        found += drafter.cancel_task()
        found += drafter.seat_tasks()
        for _ in range(2 if shows else 0):
            found += drafter.booking_task(shows)
    return found
