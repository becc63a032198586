"""Travel agency policy actions (travel/policy.md, "MODIFY BOOKING", "General availability and status
rules", "PAYMENTS AND REFUNDS") and the tasks that use them. Bookings are a list inside each traveler
record, so no schema rule derives any write on them.

Every booking tool takes the traveler_id the user gave and the booking must be one of that traveler's;
a cancelled booking cannot be modified.
- update_booking_departure_date(traveler_id, booking_id, new_departure_date, [payment_method_id]): same
  package; the new date differs, its departure is 'available' with enough slots for all travelers;
  the price moves by (new - old base price) x travelers (add-ons and insurance unchanged); the slots move
  from the old departure to the new one;
- update_booking_add_ons(traveler_id, booking_id, add_ons, [payment_method_id]): replaces the whole list;
  the price moves by the difference of the add-on sums;
- for both: a non-zero difference needs one payment_method_id saved in the traveler's profile, recorded
  as a payment entry (a refund is a negative amount) and added to total_price; a given method must be saved;
- update_booking_travelers(traveler_id, booking_id, travelers): names and dates of birth (YY-MM-DD); the
  number of travelers must stay the same;
- update_booking_rooming(traveler_id, booking_id, room_type, occupancy): price neutral;
- schedule_agent_meeting(agent_id, date, time_range, traveler_id): the date is in the agent's availability,
  the time range (HH:MM-HH:MM, start before end) lies inside one of that date's slots and overlaps no
  meeting the agent already has; appended to the agent's `meetings`.

Left out: booking a new package and cancelling (not asked here; cancellation depends on free-text
package policies the API does not enforce), the change_policy's "21 days before departure" (free text;
with the policy clock 2024-05-15 every departure in the data is far enough away), the confirmation step.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from toolorchestra.envs.toolscale.actions.shared import existing, money
from toolorchestra.envs.toolscale.drafts import Draft, Drafter, action, fact_text
from toolorchestra.envs.toolscale.tools import TEXT, ToolFailure, ToolSpec, object_schema, write_spec, writes_on

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Database, Domain
    from toolorchestra.envs.toolscale.tasks import Generator

TRAVELERS, PACKAGES, AGENTS = "travelers", "packages", "agents"
DATE = {"type": "string", "pattern": r"^\d\d-\d\d-\d\d$", "description": "YY-MM-DD"}
TIME_RANGE = {"type": "string", "pattern": r"^\d\d:\d\d-\d\d:\d\d$", "description": "HH:MM-HH:MM"}
ADD_ONS_SCHEMA = {
    "type": "array",
    "items": object_schema({"type": TEXT, "description": TEXT, "price": {"type": "number", "minimum": 0}}),
}
PEOPLE_SCHEMA = {
    "type": "array",
    "minItems": 1,
    "items": object_schema({"first_name": TEXT, "last_name": TEXT, "dob": DATE}),
}
BOOKING_ARGS = {"traveler_id": TEXT, "booking_id": TEXT}
METHOD = {"payment_method_id": TEXT}
ADD_ON_CHOICES = (
    ("excursion", "Guided city walking tour", 80.0),
    ("transfer", "Private airport transfer", 120.0),
    ("meal", "Farewell dinner", 95.0),
    ("upgrade", "Room upgrade", 250.0),
)


# --- lookups ---------------------------------------------------------------------------------------
def traveler(database: Database, traveler_id: str) -> dict[str, Any]:
    return existing(database, TRAVELERS, traveler_id, "traveler_id")


def owned_booking(database: Database, arguments: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(index in the traveler's bookings, booking) of a booking of that traveler that is not cancelled."""
    traveler_id, booking_id = arguments["traveler_id"], arguments["booking_id"]
    for index, booking in enumerate(traveler(database, traveler_id).get("bookings") or []):
        if booking.get("booking_id") == booking_id:
            if str(booking.get("status")).startswith("cancel"):
                raise ToolFailure(f"booking {booking_id!r} is {booking.get('status')}; it cannot be modified")
            return index, booking
    raise ToolFailure(f"booking_id {booking_id!r} is not a booking of traveler {traveler_id!r}")


def saved_method(database: Database, traveler_id: str, method_id: str | None, delta: float) -> str | None:
    """The payment method for a price difference: required when there is one, always a saved one."""
    if delta and not method_id:
        raise ToolFailure(f"the price changes by {delta}: a saved payment_method_id is required for the difference")
    if method_id and method_id not in (traveler(database, traveler_id).get("payment_methods") or {}):
        raise ToolFailure(f"payment_method_id {method_id!r} is not saved in the profile of traveler {traveler_id!r}")
    return method_id


def departure(database: Database, package_id: str, date: str) -> dict[str, Any]:
    departures = (database.get(PACKAGES, package_id) or {}).get("departures") or {}
    if date not in departures:
        raise ToolFailure(f"package {package_id!r} has no departure on {date}")
    return departures[date]


# --- effects ---------------------------------------------------------------------------------------
def save_booking(database: Database, traveler_id: str, index: int, booking: dict[str, Any]) -> None:
    bookings = list(traveler(database, traveler_id)["bookings"])
    bookings[index] = booking
    database.update(TRAVELERS, traveler_id, "bookings", bookings)


def charge(booking: dict[str, Any], method_id: str | None, delta: float) -> dict[str, Any]:
    """The booking with the difference recorded (a payment, or a negative refund) and its total moved."""
    if not delta:
        return booking
    entry = {"payment_id": method_id, "amount": delta}
    return {
        **booking,
        "payment_history": [*(booking.get("payment_history") or []), entry],
        "total_price": money(float(booking.get("total_price") or 0) + delta),
    }


def move_slots(database: Database, package_id: str, date: str, change: int) -> None:
    slots = int(departure(database, package_id, date).get("available_slots") or 0)
    database.update(PACKAGES, package_id, ["departures", date, "available_slots"], slots + change)


# --- tools -----------------------------------------------------------------------------------------
def update_departure_date(database: Database, arguments: dict[str, Any]) -> Any:
    index, booking = owned_booking(database, arguments)
    package_id, old_date, new_date = booking["package_id"], booking["departure_date"], arguments["new_departure_date"]
    if new_date == old_date:
        raise ToolFailure(f"the booking already departs on {new_date}")
    target, count = departure(database, package_id, new_date), len(booking.get("travelers") or [])
    if target.get("status") != "available":
        raise ToolFailure(
            f"departure {new_date} of package {package_id!r} is {target.get('status')}; "
            "only an available departure can be selected"
        )
    if int(target.get("available_slots") or 0) < count:
        raise ToolFailure(
            f"departure {new_date} has {target.get('available_slots')} available slots; the booking needs {count}"
        )
    old_price = float(departure(database, package_id, old_date).get("base_price") or 0)
    delta = money((float(target.get("base_price") or 0) - old_price) * count)
    method = saved_method(database, arguments["traveler_id"], arguments.get("payment_method_id"), delta)
    updated = charge({**booking, "departure_date": new_date}, method, delta)
    save_booking(database, arguments["traveler_id"], index, updated)
    move_slots(database, package_id, old_date, count)
    move_slots(database, package_id, new_date, -count)
    return {"booking": updated, "difference": delta}


def update_add_ons(database: Database, arguments: dict[str, Any]) -> Any:
    index, booking = owned_booking(database, arguments)
    old = sum(float(item.get("price") or 0) for item in booking.get("add_ons") or [])
    new_add_ons = [{**item, "price": float(item["price"])} for item in arguments["add_ons"]]
    delta = money(sum(item["price"] for item in new_add_ons) - old)
    method = saved_method(database, arguments["traveler_id"], arguments.get("payment_method_id"), delta)
    updated = charge({**booking, "add_ons": new_add_ons}, method, delta)
    save_booking(database, arguments["traveler_id"], index, updated)
    return {"booking": updated, "difference": delta}


def update_travelers(database: Database, arguments: dict[str, Any]) -> Any:
    index, booking = owned_booking(database, arguments)
    count, wanted = len(booking.get("travelers") or []), len(arguments["travelers"])
    if wanted != count:
        raise ToolFailure(f"the number of travelers must remain unchanged: the booking has {count}, got {wanted}")
    updated = {**booking, "travelers": [dict(person) for person in arguments["travelers"]]}
    save_booking(database, arguments["traveler_id"], index, updated)
    return {"booking": updated}


def update_rooming(database: Database, arguments: dict[str, Any]) -> Any:
    index, booking = owned_booking(database, arguments)
    updated = {**booking, "rooming": {"room_type": arguments["room_type"], "occupancy": arguments["occupancy"]}}
    save_booking(database, arguments["traveler_id"], index, updated)
    return {"booking": updated}


def minutes(time_range: str) -> tuple[int, int]:
    start, end = (int(part[:2]) * 60 + int(part[3:]) for part in time_range.split("-"))
    return start, end


def schedule_meeting(database: Database, arguments: dict[str, Any]) -> Any:
    agent_id, date, time_range = arguments["agent_id"], arguments["date"], arguments["time_range"]
    traveler(database, arguments["traveler_id"])
    agent = database.get(AGENTS, agent_id)
    if agent is None:
        raise ToolFailure(f"no agent with agent_id {agent_id!r}")
    start, end = minutes(time_range)
    if not (start < end <= 24 * 60):
        raise ToolFailure(f"invalid argument time_range: {time_range!r} must start before it ends (HH:MM-HH:MM)")
    day = (agent.get("availability") or {}).get(date)
    if day is None:
        raise ToolFailure(f"agent {agent_id!r} has no availability on {date}")
    slots = [s for s in day.get("slots") or [] if re.fullmatch(r"\d\d:\d\d-\d\d:\d\d", s)]
    if not any(minutes(s)[0] <= start and end <= minutes(s)[1] for s in slots):
        raise ToolFailure(
            f"time_range {time_range} is not inside an available slot of agent {agent_id!r} on {date} "
            f"({', '.join(slots) or 'none'})"
        )
    meetings = list(agent.get("meetings") or [])
    clash = [
        m
        for m in meetings
        if m["date"] == date and minutes(m["time_range"])[0] < end and start < minutes(m["time_range"])[1]
    ]
    if clash:
        raise ToolFailure(f"agent {agent_id!r} already has a meeting on {date} at {clash[0]['time_range']}")
    meeting = {
        "traveler_id": arguments["traveler_id"],
        "date": date,
        "time_range": time_range,
        "timezone": day.get("timezone"),
    }
    database.update(AGENTS, agent_id, "meetings", [*meetings, meeting])
    return {"agent_id": agent_id, "meeting": meeting}


def specs(domain: Domain) -> list[ToolSpec]:
    write = writes_on(TRAVELERS, "booking_id", BOOKING_ARGS)
    return [
        write(
            "update_booking_departure_date",
            "Move the traveler's booking to another departure date of the same "
            "package (available, enough slots); the base-price difference is charged or refunded to a saved "
            "payment method.",
            {"new_departure_date": DATE},
            update_departure_date,
            METHOD,
        ),
        write(
            "update_booking_add_ons",
            "Replace the whole add-on list of the traveler's booking; the difference "
            "is charged or refunded to a saved payment method.",
            {"add_ons": ADD_ONS_SCHEMA},
            update_add_ons,
            METHOD,
        ),
        write(
            "update_booking_travelers",
            "Update the names and dates of birth of the booking's travelers (same number of travelers).",
            {"travelers": PEOPLE_SCHEMA},
            update_travelers,
        ),
        write(
            "update_booking_rooming",
            "Change the booking's rooming (price neutral).",
            {"room_type": TEXT, "occupancy": {"type": "integer", "minimum": 1}},
            update_rooming,
        ),
        write_spec(
            "schedule_agent_meeting",
            "Schedule a meeting of the traveler with an agent inside one of the agent's available slots.",
            object_schema({"agent_id": TEXT, "date": DATE, "time_range": TIME_RANGE, "traveler_id": TEXT}),
            schedule_meeting,
            AGENTS,
            "agent_id",
        ),
    ]


# --- tasks -----------------------------------------------------------------------------------------
class TravelDrafter(Drafter):
    """Drafts for one traveler: the user gives their traveler id (the policy's identification), the gold
    reads their profile, then the package or agent where the change depends on it, then the write."""

    def __init__(self, generator: Generator, traveler_id: str, record: dict[str, Any]) -> None:
        self.gen, self.rng, self.traveler_id, self.record = generator, generator.rng, traveler_id, record
        self.base = generator.domain.base
        hello = f"Hi, my traveler id is {traveler_id}."
        super().__init__(f"{TRAVELERS}/{traveler_id}", hello, [action("get_traveler", traveler_id=traveler_id)])
        self.methods = list(record.get("payment_methods") or {})

    def call(self, name: str, booking: dict[str, Any], **arguments: Any) -> dict[str, Any]:
        return action(name, traveler_id=self.traveler_id, booking_id=booking["booking_id"], **arguments)

    def pay_with(self, delta: float, call: dict[str, Any]) -> str:
        """Adds the first saved method to the call when the price changes; the words that ask for it."""
        if not delta or not self.methods:
            return ""
        call["arguments"]["payment_method_id"] = self.methods[0]
        return f" Use my saved payment method {self.methods[0]} for any difference."

    def date_tasks(self, booking: dict[str, Any]) -> list[Draft]:
        package = self.base[PACKAGES][booking["package_id"]]
        count, here = len(booking["travelers"]), booking["departure_date"]
        dates = {date: dep for date, dep in package["departures"].items() if date != here}
        good = [d for d, dep in dates.items() if dep["status"] == "available" and dep["available_slots"] >= count]
        bad = [d for d, dep in dates.items() if d not in good]
        read = action("get_package", package_id=booking["package_id"])

        def ask(date: str) -> str:
            return f"Please move my booking {booking['booking_id']} to the {date} departure."

        drafts = []
        if good:
            date = self.rng.choice(good)
            old = float(package["departures"][here]["base_price"])
            delta = money((float(dates[date]["base_price"]) - old) * count)
            call = self.call("update_booking_departure_date", booking, new_departure_date=date)
            drafts.append(self.write(ask(date) + self.pay_with(delta, call), [read, call]))
        if bad:
            date = self.rng.choice(bad)
            call = self.call("update_booking_departure_date", booking, new_departure_date=date)
            drafts.append(self.refuse(ask(date) + self.pay_with(1, call), [read], call, "booking_id"))
        return drafts

    def add_on_task(self, booking: dict[str, Any]) -> list[Draft]:
        kind, description, price = self.rng.choice(ADD_ON_CHOICES)
        add_ons = [*(booking.get("add_ons") or []), {"type": kind, "description": description, "price": price}]
        call = self.call("update_booking_add_ons", booking, add_ons=add_ons)
        listed = "; ".join(f"{a['type']}: {a['description']} ({fact_text(float(a['price']))})" for a in add_ons)
        request = (
            f"Please add the add-on '{description}' ({kind}, {fact_text(price)}) to my booking "
            f"{booking['booking_id']}, keeping the others; the full list is then: {listed}."
        )
        if self.methods:
            return [self.write(request + self.pay_with(price, call), [call])]
        unsaved = "PM-" + self.traveler_id  # no saved method: the user offers one that is not on file
        call["arguments"]["payment_method_id"] = unsaved
        return [self.refuse(request + f" Charge my card {unsaved}.", [], call, "booking_id")]

    def traveler_tasks(self, booking: dict[str, Any]) -> list[Draft]:
        people = [dict(person) for person in booking["travelers"]]
        index = self.rng.randrange(len(people))
        old_name = people[index]["last_name"]
        people[index]["last_name"] = old_name + "-" + self.rng.choice(["Berg", "Moreau", "Silva", "Tanaka"])
        who = "; ".join(f"{p['first_name']} {p['last_name']} (born {p['dob']})" for p in people)
        drafts = [
            self.write(
                f"My companion's last name changed. Please update the travelers of my "
                f"booking {booking['booking_id']} to: {who}.",
                [self.call("update_booking_travelers", booking, travelers=people)],
            )
        ]
        if self.rng.random() < 0.4:
            extra = [*booking["travelers"], {"first_name": "Sam", "last_name": old_name, "dob": "10-06-01"}]
            who = "; ".join(f"{p['first_name']} {p['last_name']} (born {p['dob']})" for p in extra)
            call = self.call("update_booking_travelers", booking, travelers=extra)
            request = f"Please add a traveler to my booking {booking['booking_id']}: the travelers should be {who}."
            drafts.append(self.refuse(request, [], call, "booking_id"))
        return drafts

    def rooming_task(self, booking: dict[str, Any]) -> list[Draft]:
        current = (booking.get("rooming") or {}).get("room_type")
        room = self.rng.choice([r for r in ("single", "double", "twin", "triple", "suite") if r != current])
        occupancy = len(booking["travelers"])
        return [
            self.write(
                f"Please change the rooming of my booking {booking['booking_id']} to a {room} room for {occupancy}.",
                [self.call("update_booking_rooming", booking, room_type=room, occupancy=occupancy)],
            )
        ]

    def foreign_booking_task(self, other_id: str, booking: dict[str, Any]) -> list[Draft]:
        """Another traveler's booking: not theirs to change."""
        room = "suite"
        call = self.call("update_booking_rooming", booking, room_type=room, occupancy=len(booking["travelers"]))
        request = (
            f"Please change the rooming of booking {booking['booking_id']} (my friend {other_id}'s) to a {room} room."
        )
        return [self.refuse(request, [], call, "booking_id")]

    def meeting_tasks(self, agent_id: str) -> list[Draft]:
        agent = self.base[AGENTS][agent_id]
        days = sorted(agent.get("availability") or {})
        if not days:
            return []
        date = self.rng.choice(days)
        slot = self.rng.choice(agent["availability"][date]["slots"])
        start = slot.split("-")[0]
        hour = int(start[:2]) + 1
        time_range = f"{start}-{hour:02d}:{start[3:]}"
        call = action(
            "schedule_agent_meeting", agent_id=agent_id, date=date, time_range=time_range, traveler_id=self.traveler_id
        )
        read = action("get_agent", agent_id=agent_id)

        def ask(d: str, t: str) -> str:
            return f"Please schedule a meeting with agent {agent_id} on {d} at {t}."

        drafts = [self.write(ask(date, time_range), [read, call])]
        late = f"{max(minutes(s)[1] for s in agent['availability'][date]['slots']) // 60:02d}:30"
        if self.rng.random() < 0.4 and late < "23:00":
            late_range = f"{late}-{int(late[:2]) + 1:02d}:30"
            refused = {**call, "arguments": {**call["arguments"], "time_range": late_range}}
            drafts.append(self.refuse(ask(date, late_range), [read], refused, "agent_id"))
        return drafts


def drafts(generator: Generator) -> list[Draft]:
    """Per traveler booking: a date change (refused for a sold-out, limited or too small departure), an
    add-on, for some a traveler-name fix (refused when adding a traveler), a rooming change, another
    traveler's booking (refused); per traveler a meeting with their booking's agent (refused outside the
    agent's slots)."""
    base, found = generator.domain.base, []
    travelers = list(base[TRAVELERS].items())
    for traveler_id, record in travelers:
        drafter = TravelDrafter(generator, traveler_id, record)
        bookings = [b for b in record.get("bookings") or [] if b.get("package_id") in base[PACKAGES]]
        for booking in bookings:
            found += drafter.date_tasks(booking)
            if generator.rng.random() < 0.5:
                found += drafter.add_on_task(booking)
            if generator.rng.random() < 0.4:
                found += drafter.traveler_tasks(booking)
            if generator.rng.random() < 0.3:
                found += drafter.rooming_task(booking)
        others = [
            (other_id, b)
            for other_id, other in travelers
            if other_id != traveler_id
            for b in other.get("bookings") or []
        ]
        if others and generator.rng.random() < 0.2:
            found += drafter.foreign_booking_task(*generator.rng.choice(others))
        agents = [b["agent_id"] for b in bookings if b.get("agent_id") in base[AGENTS]]
        if agents:
            found += drafter.meeting_tasks(generator.rng.choice(agents))
    return found
