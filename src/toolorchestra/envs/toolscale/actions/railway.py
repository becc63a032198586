"""Railway policy actions (railway/policy.md, "Cancel reservation", "Modify reservation" (bags and bikes,
passengers, payment for modifications), "Wallet Top-ups", "Domain Basic" payment rules) and the tasks that
use them. The schema rules derive only set_reservation_status and update_user_email for this domain.

Every reservation tool takes the user_id the user is authenticated as; the reservation must be one of that
user's and not cancelled. The clock is the policy's (2024-05-15 15:00 EST): every created_at and train date in
the data is later, so no booking was made "within the last 24 hours" and no journey has departed.
- cancel_reservation(user_id, reservation_id, reason): reason one of change_of_plan, health, weather,
  train_cancelled, other; no segment may have departed (that needs a human agent); it is cancelled only if the
  booking was made in the 24 hours before the clock, or a train of the reservation is cancelled on its date,
  or the class is first_class, or the insurance is 'yes' and the reason a covered one (health, weather).
  Status 'cancelled'; every payment_id with a net positive amount in payment_history gets a refund entry of
  minus that amount (the money reaches the original methods in 5 to 7 business days, so no balance moves);
- modify_reservation_bags(user_id, reservation_id, total_bags, bikes, [payment_method_id]): integers >= 0 and
  a change; bags beyond 1 per passenger cost $15 each, bikes $10 each, the difference of those fees is charged
  (or refunded, negative) to one saved payment method, required when the difference is non-zero; a wallet must
  hold a charge (whole dollars: the fees are) and its balance moves with a charge or a refund;
- update_passengers(user_id, reservation_id, passengers): first name, last name and a real YYYY-MM-DD date of
  birth not after the clock for each; the number of passengers must stay the same and something must change;
- add_wallet_funds(user_id, amount, [payment_method_id]): a positive whole-dollar amount added to the user's
  wallet (a new wallet `wallet_<user_id>` is created where there is none); a funding method, if given, must be
  a saved card (not a wallet).

Left out: book_reservation, modify_reservation_trains and the travel-class change: trains carry no fares in
db.json ("pricing is simulated"), so neither a new booking nor a changed segment can be priced from the data
and no gold total could be checked; the compensation rules (membership, insurance, first class; $100 or $50 per
passenger): compensation is paid with add_wallet_funds, and a tool cannot tell a gesture from a top-up; the
one-call-at-a-time and confirmation steps; transfer_to_human_agents. The stored class names ('first class',
'ac 2-tier', ...) are compared with the policy's (first_class, ac_2_tier) after normalising spaces and dashes.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import TYPE_CHECKING, Any

from toolorchestra.envs.toolscale.actions.shared import existing
from toolorchestra.envs.toolscale.drafts import Draft, Drafter, action, fact_text
from toolorchestra.envs.toolscale.tools import TEXT, ToolFailure, ToolSpec, object_schema, write_spec, writes_on

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Database, Domain
    from toolorchestra.envs.toolscale.tasks import Generator

USERS, RESERVATIONS, TRAINS = "users", "reservations", "trains"
EST = datetime.timezone(datetime.timedelta(hours=-5))
CLOCK = datetime.datetime(2024, 5, 15, 15, 0, tzinfo=EST)  # the policy's "current time"
REASONS = ("change_of_plan", "health", "weather", "train_cancelled", "other")
COVERED = ("health", "weather")  # the reasons travel insurance covers
BAG_FEE, BIKE_FEE = 15, 10
COUNT = {"type": "integer", "minimum": 0}
DATE = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "description": "YYYY-MM-DD"}
PASSENGERS_SCHEMA = {
    "type": "array",
    "minItems": 1,
    "items": object_schema({"first_name": TEXT, "last_name": TEXT, "dob": DATE}),
}
RESERVATION_ARGS = {"user_id": TEXT, "reservation_id": TEXT}
METHOD = {"payment_method_id": TEXT}


# --- lookups ---------------------------------------------------------------------------------------
def user(database: Database, user_id: str) -> dict[str, Any]:
    return existing(database, USERS, user_id, "user_id")


def owned_reservation(database: Database, arguments: dict[str, Any], for_change: bool = True) -> dict[str, Any]:
    """The user's reservation; for a change (not a cancellation) it must not be cancelled."""
    user_id, reservation_id = arguments["user_id"], arguments["reservation_id"]
    user(database, user_id)
    record = existing(database, RESERVATIONS, reservation_id, "reservation_id")
    if record.get("user_id") != user_id:
        raise ToolFailure(f"reservation_id {reservation_id!r} is not a reservation of user {user_id!r}")
    if for_change and record.get("status") == "cancelled":
        raise ToolFailure(f"reservation {reservation_id!r} is cancelled; it cannot be modified")
    return record


def travel_class(record: dict[str, Any]) -> str:
    """The stored class in the policy's spelling ('first class' -> first_class, 'ac 2-tier' -> ac_2_tier)."""
    return re.sub(r"[\s-]+", "_", str(record.get("class") or "").strip().lower())


def saved_method(database: Database, user_id: str, method_id: str) -> dict[str, Any]:
    method = (user(database, user_id).get("payment_methods") or {}).get(method_id)
    if not isinstance(method, dict):
        raise ToolFailure(f"payment_method_id {method_id!r} is not saved in the profile of user {user_id!r}")
    return method


def parse_time(text: str) -> datetime.datetime | None:
    """A data timestamp ('2025-08-15 10:22:35', '2025-08-15t10:30:00+05:30') in EST; naive ones are EST."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip().upper())
    except ValueError:
        return None
    return moment.replace(tzinfo=EST) if moment.tzinfo is None else moment.astimezone(EST)


def departure(database: Database, segment: dict[str, Any]) -> datetime.datetime | None:
    """When the segment leaves: its date at the train's scheduled time (HH:MM; midnight when unknown)."""
    try:
        day = datetime.date.fromisoformat(str(segment.get("date")))
    except ValueError:
        return None
    train = database.get(TRAINS, str(segment.get("train_number"))) or {}
    found = re.search(r"(\d\d):(\d\d)", str(train.get("scheduled_departure_time_local") or ""))
    hour, minute = (int(found[1]), int(found[2])) if found and int(found[1]) < 24 and int(found[2]) < 60 else (0, 0)
    return datetime.datetime.combine(day, datetime.time(hour, minute), EST)


def cancelled_trains(database: Database, record: dict[str, Any]) -> list[str]:
    """'train on date' for each segment whose train the railway cancelled on that date."""
    found = []
    for segment in record.get("trains") or []:
        number, date = str(segment.get("train_number")), str(segment.get("date"))
        day = ((database.get(TRAINS, number) or {}).get("dates") or {}).get(date) or {}
        if day.get("status") == "cancelled":
            found.append(f"{number} on {date}")
    return found


def booked_recently(record: dict[str, Any]) -> bool:
    created = parse_time(str(record.get("created_at") or ""))
    return created is not None and datetime.timedelta(0) <= CLOCK - created <= datetime.timedelta(hours=24)


# --- effects ---------------------------------------------------------------------------------------
def pay(database: Database, user_id: str, record: dict[str, Any], method_id: str, delta: int) -> dict[str, Any]:
    """Charge (delta > 0) or refund (delta < 0) one saved method: a payment_history entry, and a wallet's
    balance moves with it (a wallet must hold a charge)."""
    method = saved_method(database, user_id, method_id)
    if method.get("source") == "wallet":
        balance = (method.get("extra_info") or {}).get("amount") or 0
        if delta > balance:
            raise ToolFailure(f"wallet {method_id!r} holds {balance}, less than the charge of {delta}")
        database.update(USERS, user_id, ["payment_methods", method_id, "extra_info", "amount"], balance - delta)
    history = [*(record.get("payment_history") or []), {"payment_id": method_id, "amount": float(delta)}]
    database.update(RESERVATIONS, record["reservation_id"], "payment_history", history)
    return {"payment_id": method_id, "amount": float(delta)}


# --- tools -----------------------------------------------------------------------------------------
def cancel_reservation(database: Database, arguments: dict[str, Any]) -> Any:
    record = owned_reservation(database, arguments, for_change=False)
    key, reason = arguments["reservation_id"], arguments["reason"]
    if record.get("status") == "cancelled":
        raise ToolFailure(f"reservation {key!r} is already cancelled")
    if reason not in REASONS:
        raise ToolFailure(f"invalid argument reason: {reason!r}; the reason must be one of {', '.join(REASONS)}")
    for segment in record.get("trains") or []:
        leaves = departure(database, segment)
        if leaves is not None and leaves <= CLOCK:
            raise ToolFailure(
                f"train {segment.get('train_number')} on {segment.get('date')} has already departed; "
                "a journey under way cannot be cancelled here: transfer to a human agent"
            )
    cancelled, insured = cancelled_trains(database, record), record.get("insurance") == "yes"
    grounds = (
        (["booked within the last 24 hours"] if booked_recently(record) else [])
        + [f"train {train} is cancelled" for train in cancelled]
        + (["first_class reservation"] if travel_class(record) == "first_class" else [])
        + ([f"travel insurance covers {reason}"] if insured and reason in COVERED else [])
    )
    if not grounds:
        insurance = (
            f"the reason {reason!r} is not one the insurance covers" if insured else "it has no travel insurance"
        )
        raise ToolFailure(
            f"reservation {key!r} cannot be cancelled: it was not booked within the last 24 hours, "
            f"none of its trains is cancelled, its class is {travel_class(record) or 'unknown'} "
            f"(not first_class) and {insurance} (covered reasons: {', '.join(COVERED)})"
        )
    net: dict[str, float] = {}
    for payment in record.get("payment_history") or []:
        net[str(payment.get("payment_id"))] = net.get(str(payment.get("payment_id")), 0.0) + float(payment["amount"])
    refunds = [{"payment_id": pid, "amount": -amount} for pid, amount in net.items() if amount > 0]
    database.update(RESERVATIONS, key, "payment_history", [*(record.get("payment_history") or []), *refunds])
    database.update(RESERVATIONS, key, "status", "cancelled")
    return {
        "reservation_id": key,
        "status": "cancelled",
        "grounds": grounds,
        "refunds": refunds,
        "note": "refunds reach the original payment methods within 5 to 7 business days",
    }


def bag_fees(bags: int, bikes: int, passengers: int) -> int:
    return BAG_FEE * max(0, bags - passengers) + BIKE_FEE * bikes


def modify_bags(database: Database, arguments: dict[str, Any]) -> Any:
    record = owned_reservation(database, arguments)
    user_id, key = arguments["user_id"], arguments["reservation_id"]
    bags, bikes = int(arguments["total_bags"]), int(arguments["bikes"])
    old_bags, old_bikes = int(record.get("total_bags") or 0), int(record.get("bikes") or 0)
    if (bags, bikes) == (old_bags, old_bikes):
        raise ToolFailure(f"reservation {key!r} already has {bags} bags and {bikes} bikes; nothing to change")
    count = len(record.get("passengers") or [])
    delta = bag_fees(bags, bikes, count) - bag_fees(old_bags, old_bikes, count)
    method_id = arguments.get("payment_method_id") or ""
    if delta and not method_id:
        raise ToolFailure(f"the fees change by {delta}: one saved payment_method_id is required for the difference")
    payment = pay(database, user_id, record, method_id, delta) if delta else None
    if method_id and not delta:
        saved_method(database, user_id, method_id)  # named but unused: it must still be the user's own
    database.update(RESERVATIONS, key, "total_bags", bags)
    database.update(RESERVATIONS, key, "bikes", bikes)
    return {"reservation_id": key, "total_bags": bags, "bikes": bikes, "difference": delta, "payment": payment}


def update_passengers(database: Database, arguments: dict[str, Any]) -> Any:
    record = owned_reservation(database, arguments)
    key, wanted = arguments["reservation_id"], arguments["passengers"]
    count = len(record.get("passengers") or [])
    if len(wanted) != count:
        raise ToolFailure(f"the number of passengers cannot change: the reservation has {count}, got {len(wanted)}")
    people = []
    for index, person in enumerate(wanted):
        names = {part: person[part].strip() for part in ("first_name", "last_name")}
        empty = next((part for part, name in names.items() if not name), None)
        if empty:
            raise ToolFailure(f"invalid argument passengers.{index}.{empty}: a name is required")
        try:
            born = datetime.date.fromisoformat(person["dob"])
        except ValueError:
            raise ToolFailure(
                f"invalid argument passengers.{index}.dob: {person['dob']!r} is not a real YYYY-MM-DD date"
            ) from None
        if born > CLOCK.date():
            raise ToolFailure(
                f"invalid argument passengers.{index}.dob: {person['dob']} is after today ({CLOCK.date()})"
            )
        people.append({**names, "dob": person["dob"]})
    if people == record.get("passengers"):
        raise ToolFailure(f"the passengers of reservation {key!r} are already these; nothing to change")
    database.update(RESERVATIONS, key, "passengers", people)
    return {"reservation_id": key, "passengers": people}


def add_wallet_funds(database: Database, arguments: dict[str, Any]) -> Any:
    user_id, amount = arguments["user_id"], arguments["amount"]
    methods = user(database, user_id).get("payment_methods") or {}
    if not (math.isfinite(amount) and amount > 0 and float(amount).is_integer()):
        raise ToolFailure(f"invalid argument amount: top-ups must be positive whole-dollar amounts, got {amount!r}")
    funding = arguments.get("payment_method_id")
    if funding is not None and saved_method(database, user_id, funding).get("source") == "wallet":
        raise ToolFailure(f"payment_method_id {funding!r} is a wallet; a top-up is funded by a saved card")
    wallet_id = next((key for key, m in methods.items() if isinstance(m, dict) and m.get("source") == "wallet"), None)
    created = wallet_id is None
    if wallet_id is None:
        wallet_id = f"wallet_{user_id}"
        balance = int(amount)
        wallet = {"source": "wallet", "id": wallet_id, "extra_info": {"amount": balance}}
        database.update(USERS, user_id, ["payment_methods", wallet_id], wallet)
    else:
        balance = int(((methods[wallet_id].get("extra_info") or {}).get("amount") or 0) + amount)
        database.update(USERS, user_id, ["payment_methods", wallet_id, "extra_info", "amount"], balance)
    return {"user_id": user_id, "wallet_id": wallet_id, "created": created, "amount": int(amount), "balance": balance}


def specs(domain: Domain) -> list[ToolSpec]:
    write = writes_on(RESERVATIONS, "reservation_id", RESERVATION_ARGS)
    # reason and amount are checked in the handlers (not by enum / multipleOf) so that a value the policy
    # does not allow fails with the rule's own message
    return [
        write(
            "cancel_reservation",
            "Cancel the user's reservation (none of it departed) when it was booked in the "
            "last 24 hours, a train of it is cancelled, it is first_class, or it is insured and the reason is "
            "covered (health, weather); payments are refunded to the original methods.",
            {"reason": {"type": "string", "minLength": 1, "description": "one of " + ", ".join(REASONS)}},
            cancel_reservation,
        ),
        write(
            "modify_reservation_bags",
            "Set the reservation's total bags and bikes ($15 per bag beyond 1 per "
            "passenger, $10 per bike); the fee difference is charged or refunded to one saved payment method.",
            {"total_bags": COUNT, "bikes": COUNT},
            modify_bags,
            METHOD,
        ),
        write(
            "update_passengers",
            "Update the names and dates of birth (YYYY-MM-DD) of the reservation's "
            "passengers (same number of passengers).",
            {"passengers": PASSENGERS_SCHEMA},
            update_passengers,
        ),
        write_spec(
            "add_wallet_funds",
            "Add a positive whole-dollar amount to the user's wallet (created if the user "
            "has none), optionally funded by a saved card.",
            object_schema({"user_id": TEXT, "amount": {"type": "number", "description": "whole dollars, > 0"}}, METHOD),
            add_wallet_funds,
            USERS,
            "user_id",
        ),
    ]


# --- tasks -----------------------------------------------------------------------------------------
REASON_WORDS = {
    "change_of_plan": "my plans changed",
    "health": "I am ill (a health reason)",
    "weather": "a storm is forecast (weather)",
    "train_cancelled": "one of my trains was cancelled",
    "other": "personal reasons",
}
TOP_UPS = (20, 50, 75, 100, 150, 200)


class RailwayDrafter(Drafter):
    """Drafts for one user authenticated by email (the environment's rule; it yields the policy's user id): the
    gold authenticates, reads the reservation (and the profile or trains where the rule depends on them), then
    writes; refusals stop after the reads and their write must fail."""

    def __init__(self, generator: Generator, user_id: str, record: dict[str, Any], email: str) -> None:
        self.gen, self.rng, self.user_id, self.record = generator, generator.rng, user_id, record
        super().__init__(
            f"{USERS}/{user_id}", f"Hi, my email is {email}.", [action("find_user_id_by_email", email=email)]
        )
        self.profile = action("get_user", user_id=user_id)
        self.methods = record.get("payment_methods") or {}

    def call(self, name: str, reservation_id: str, **arguments: Any) -> dict[str, Any]:
        return action(name, user_id=self.user_id, reservation_id=reservation_id, **arguments)

    def method(self, source: str) -> str | None:
        return next((key for key, m in self.methods.items() if m.get("source") == source), None)

    def cancel_task(self, key: str, reservation: dict[str, Any]) -> list[Draft]:
        base = self.gen.domain.new_database()
        cancelled = cancelled_trains(base, reservation)
        first = travel_class(reservation) == "first_class"
        if cancelled:
            reason = "train_cancelled"
        elif first:
            reason = self.rng.choice(REASONS[:3] + ("other",))
        else:  # insured or not: a covered reason cancels only with insurance
            reason = self.rng.choice(("change_of_plan", "health", "weather", "other"))
        allowed = reservation.get("status") != "cancelled" and bool(
            cancelled or first or (reservation.get("insurance") == "yes" and reason in COVERED)
        )
        reads = [action("get_reservation", reservation_id=key)]
        if cancelled:  # the agent checks the train's status on the date before relying on it
            reads += [
                action("get_train", train_number=number)
                for number in dict.fromkeys(s["train_number"] for s in reservation["trains"])
                if base.get(TRAINS, number) is not None
            ]
        call = self.call("cancel_reservation", key, reason=reason)
        request = f"Please cancel my reservation {key}; the reason: {REASON_WORDS[reason]}."
        if allowed:
            return [self.write(request, [*reads, call])]
        return [self.refuse(request, reads, call, "reservation_id", also=("set_reservation_status",))]

    def bag_task(self, key: str, reservation: dict[str, Any]) -> list[Draft]:
        bags, bikes = int(reservation["total_bags"]), int(reservation["bikes"])
        count = len(reservation["passengers"])
        options = [(bags + 1, bikes), (bags, bikes + 1)]
        options += [(bags, bikes - 1)] if bikes else []
        options += [(bags - 1, bikes)] if bags > count else []
        new_bags, new_bikes = self.rng.choice(options)
        delta = bag_fees(new_bags, new_bikes, count) - bag_fees(bags, bikes, count)
        call = self.call("modify_reservation_bags", key, total_bags=new_bags, bikes=new_bikes)
        request = (
            f"Please change my reservation {key} to {new_bags} bag{'s' * (new_bags != 1)} in total and "
            f"{new_bikes} bike{'s' * (new_bikes != 1)}."
        )
        reads = [action("get_reservation", reservation_id=key)]
        if not delta:
            return [self.write(request, [*reads, call])]
        source = self.rng.choice(["card", "wallet"])
        method_id = self.method(source)
        if method_id is None:
            return []
        foreign = self.rng.random() < 0.15 and self.foreign_card()
        if foreign:  # a method from another profile: the policy takes only the user's saved ones
            call["arguments"]["payment_method_id"] = foreign
            request += f" Use my card {foreign} for the difference."
            return [self.refuse(request, [*reads, self.profile], call, "reservation_id")]
        call["arguments"]["payment_method_id"] = method_id
        request += f" Use my {source} {method_id} for the difference."
        balance = (self.methods[method_id].get("extra_info") or {}).get("amount") or 0
        held = source != "wallet" or delta <= balance  # else the wallet cannot hold the charge
        return [self.decide(held, request, [*reads, self.profile], call, "reservation_id")]

    def foreign_card(self) -> str | None:
        cards = [
            m
            for other, u in self.gen.domain.base[USERS].items()
            if other != self.user_id
            for m, method in (u.get("payment_methods") or {}).items()
            if method.get("source") == "card" and m not in self.methods
        ]
        return self.rng.choice(cards) if cards else None

    def passenger_tasks(self, key: str, reservation: dict[str, Any]) -> list[Draft]:
        people = [dict(person) for person in reservation["passengers"]]
        index = self.rng.randrange(len(people))
        if self.rng.random() < 0.5:  # a typo in the date of birth: a day later
            day = datetime.date.fromisoformat(people[index]["dob"]) + datetime.timedelta(days=1)
            people[index]["dob"] = day.isoformat()
        else:
            people[index]["last_name"] += "-" + self.rng.choice(["berg", "moreau", "silva", "tanaka"])

        def who(group: list[dict[str, Any]]) -> str:
            return "; ".join(f"{p['first_name']} {p['last_name']} (born {p['dob']})" for p in group)

        read = action("get_reservation", reservation_id=key)
        drafts = [
            self.write(
                f"Please correct the passengers of my reservation {key}; they should be: {who(people)}.",
                [read, self.call("update_passengers", key, passengers=people)],
            )
        ]
        if self.rng.random() < 0.3:
            extra = [
                *reservation["passengers"],
                {"first_name": "sam", "last_name": people[0]["last_name"], "dob": "2012-06-01"},
            ]
            request = f"Please add a passenger to my reservation {key}: the passengers should be {who(extra)}."
            drafts.append(
                self.refuse(request, [read], self.call("update_passengers", key, passengers=extra), "reservation_id")
            )
        return drafts

    def wallet_task(self) -> list[Draft]:
        amount, card = self.rng.choice(TOP_UPS), self.method("card")
        if self.rng.random() < 0.25:  # cents: the policy takes whole dollars only
            odd = amount + self.rng.choice([0.5, 0.25, 0.99])
            call = action("add_wallet_funds", user_id=self.user_id, amount=odd)
            return [self.refuse(f"Please add {fact_text(odd)} dollars to my wallet.", [self.profile], call, "user_id")]
        call = action("add_wallet_funds", user_id=self.user_id, amount=amount)
        request = f"Please add {amount} dollars to my wallet"
        if card and self.rng.random() < 0.5:
            call["arguments"]["payment_method_id"] = card
            request += f", paid with my card {card}"
        return [self.write(request + ".", [self.profile, call])]

    def foreign_reservation_task(self, key: str, other_id: str) -> list[Draft]:
        """Another user's reservation: not this user's to cancel, whatever the grounds."""
        call = self.call("cancel_reservation", key, reason="change_of_plan")
        request = (
            f"Please cancel reservation {key} of my friend {other_id}; the reason: {REASON_WORDS['change_of_plan']}."
        )
        read = action("get_reservation", reservation_id=key)
        return [self.refuse(request, [read], call, "reservation_id", also=("set_reservation_status",))]


def drafts(generator: Generator) -> list[Draft]:
    """Per reservation of a user with a unique email: a cancellation (refused where no ground applies or it is
    already cancelled) and, unless cancelled, for some a bags/bikes change (refused for a wallet short of the
    charge or another profile's card) and a passenger fix (refused when adding a passenger); per user a wallet
    top-up (refused for cents) and, for some, another user's reservation to cancel (refused)."""
    base, found = generator.domain.base, []
    for user_id, record, email in generator.by_email(USERS):
        drafter = RailwayDrafter(generator, user_id, record, email)
        for key, reservation in base[RESERVATIONS].items():
            if reservation.get("user_id") != user_id:
                continue
            found += drafter.cancel_task(key, reservation)
            if reservation.get("status") == "cancelled":
                continue
            if generator.rng.random() < 0.6:
                found += drafter.bag_task(key, reservation)
            if generator.rng.random() < 0.4:
                found += drafter.passenger_tasks(key, reservation)
        found += drafter.wallet_task()
        others = [(key, r["user_id"]) for key, r in base[RESERVATIONS].items() if r.get("user_id") != user_id]
        if others and generator.rng.random() < 0.15:
            found += drafter.foreign_reservation_task(*generator.rng.choice(others))
    return found
