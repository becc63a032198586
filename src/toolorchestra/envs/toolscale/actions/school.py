"""School policy actions (school/policy.md, "Register courses", "Modify registration", "Cancel
registration", "Payments and refunds") and the tasks that use them.

Pricing: db.json has no rate table (stored tuitions vary), so a course registered now costs credits x
the median stored rate per credit of the study level (undergraduate 500, graduate 600, continuing_ed 300;
the tool descriptions say so); registered courses keep their stored tuition. Health insurance is a 300
fee. A course is full when current_enrollment has reached capacity; two courses conflict when they share
a meeting day and their times overlap.

- register_courses(student_id, term, study_level, courses[{course_id, [grading_option]}], health_insurance,
  payments[{payment_id, amount}]): courses exist, listed once, all in the term (YYYY-TERM), none full, no
  conflict; each payment_id a saved method of the student, amounts > 0 summing exactly to the total due.
  Creates the registration (key from `new_key`, grading letter by default, full-time from 12 credits,
  overload above 18, campus of the first course, no advisors or aid), lists it on the student, enrolls;
- modify_registration(student_id, registration_id, [add_courses], [drop_course_ids], [grading_changes],
  [payment_id], [health_insurance]): the student's own registration, not canceled; health insurance
  cannot change (the same value passes); at least one change; drops are registered courses, adds new
  ones of the registration's term, not full; grading changes name a kept course and a new option; at
  least one course stays and none conflict. An increase is charged to payment_id (required, a saved
  method); a decrease is a negative amount under payment_id (a saved method or one of the history) or
  the latest positive payment; no difference takes no payment_id. Enrollments follow; credits, status
  and overload are recomputed when the course set changes;
- cancel_registration(student_id, registration_id): the student's own registration, not canceled; all
  courses dropped (enrollments reduced), each payment_id of the history refunded its net paid amount as a
  negative amount, credits 0, status canceled.

Left out: a standalone payment tool (payments, aid and tuition disagree in nearly every stored
registration, so there is no balance to check a payment against); the waitlist (the policy only says a
full course fails); sections (the catalog has none: new lines get section null); a hard credit limit
(the policy only tracks overload); the department/search/meeting-status reads (the derived get/list/find
tools partly cover them); the confirmation step. Students name themselves by student_id (the policy's
first step), so the tasks need no unique email.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from toolorchestra.envs.toolscale.actions.shared import AMOUNT_SCHEMA, existing, money, new_key, positive_amount
from toolorchestra.envs.toolscale.drafts import Draft, Drafter, action, fact_text
from toolorchestra.envs.toolscale.tools import TEXT, ToolFailure, ToolSpec, object_schema, write_spec, writes_on

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Database, Domain
    from toolorchestra.envs.toolscale.tasks import Generator

COURSES, STUDENTS, REGISTRATIONS = "courses", "students", "registrations"
TODAY = "24-05-15"  # the policy's clock (2024-05-15) in the data's YY-MM-DD format
LEVELS = ("undergraduate", "graduate", "continuing_ed")
GRADING = ("letter", "pass/fail", "audit")
RATE_PER_CREDIT = {"undergraduate": 500.0, "graduate": 600.0, "continuing_ed": 300.0}
HEALTH_FEE = 300.0
FULL_TIME_CREDITS, STANDARD_LOAD = 12, 18
CANCELED = "canceled"
TERM = re.compile(r"^\d{4}-[A-Z]+$")
PICK_SCHEMA = object_schema({"course_id": TEXT}, {"grading_option": {"type": "string", "enum": list(GRADING)}})
YES_NO = {"type": "string", "enum": ["yes", "no"]}


# --- lookups and rules -----------------------------------------------------------------------------
def student(database: Database, student_id: str) -> dict[str, Any]:
    return existing(database, STUDENTS, student_id, "student_id")


def course(database: Database, course_id: str) -> dict[str, Any]:
    return existing(database, COURSES, course_id, "course_id", "course")


def own_registration(database: Database, student_id: str, registration_id: str) -> dict[str, Any]:
    """The student's registration, not canceled."""
    student(database, student_id)
    record = existing(database, REGISTRATIONS, registration_id, "registration_id")
    if record.get("student_id") != student_id:
        raise ToolFailure(f"registration_id {registration_id!r} is not a registration of student {student_id!r}")
    if record.get("status") == CANCELED:
        raise ToolFailure(f"registration {registration_id!r} is canceled; it cannot be changed or canceled again")
    return record


def distinct(ids: list[str], argument: str) -> None:
    if len(set(ids)) != len(ids):
        raise ToolFailure(f"invalid argument {argument}: a course_id is listed twice")


def require_term(record: dict[str, Any], term: str) -> None:
    if record.get("term") != term:
        raise ToolFailure(
            f"course {record['course_id']!r} is in term {record.get('term')}, not {term}; all courses "
            "must be in the registration's term"
        )


def require_open(record: dict[str, Any]) -> None:
    if int(record.get("current_enrollment", 0)) >= int(record.get("capacity", 0)):
        raise ToolFailure(
            f"course {record['course_id']!r} ({record.get('course_code')}) is full (enrollment "
            f"{record.get('current_enrollment')} of capacity {record.get('capacity')})"
        )


def clash(first: dict[str, Any], second: dict[str, Any]) -> str | None:
    """The shared day on which the two courses' meetings overlap, if any (times are "HH-MM", so they
    compare as strings)."""
    a, b = first.get("meeting_pattern") or {}, second.get("meeting_pattern") or {}
    days = sorted(set(a.get("days") or []) & set(b.get("days") or []))
    overlap = a.get("start_time_est", "") < b.get("end_time_est", "") and b.get("start_time_est", "") < a.get(
        "end_time_est", ""
    )
    return days[0] if days and overlap else None


def require_no_conflict(records: list[dict[str, Any]]) -> None:
    for index, first in enumerate(records):
        for second in records[index + 1 :]:
            if day := clash(first, second):
                raise ToolFailure(
                    f"schedule conflict: courses {first['course_id']!r} and {second['course_id']!r} overlap on {day}"
                )


def saved_method(holder: dict[str, Any], payment_id: str, argument: str) -> None:
    if payment_id not in (holder.get("payment_methods") or {}):
        raise ToolFailure(
            f"{argument} {payment_id!r} is not a saved payment method of student {holder.get('student_id')!r}"
        )


def tuition(record: dict[str, Any], level: str) -> float:
    return money(float(record.get("credits", 0)) * RATE_PER_CREDIT[level])


def course_line(record: dict[str, Any], grading: str, level: str) -> dict[str, Any]:
    return {
        "course_id": record["course_id"],
        "course_code": record.get("course_code"),
        "section": None,
        "title": record.get("title"),
        "credits": record.get("credits", 0),
        "grading_option": grading,
        "tuition": tuition(record, level),
    }


def load(lines: list[dict[str, Any]]) -> dict[str, Any]:
    credits = sum(int(line.get("credits", 0)) for line in lines)
    return {
        "total_credits": credits,
        "status": "full-time" if credits >= FULL_TIME_CREDITS else "part-time",
        "overload_credits": max(0, credits - STANDARD_LOAD),
    }


def enroll(database: Database, course_ids: list[str], delta: int) -> None:
    for course_id in course_ids:
        record = database.get(COURSES, course_id)
        if record is not None:
            database.update(
                COURSES, course_id, "current_enrollment", max(0, int(record.get("current_enrollment", 0)) + delta)
            )


# --- tools -----------------------------------------------------------------------------------------
def register_courses(database: Database, arguments: dict[str, Any]) -> Any:
    student_id, term, level = arguments["student_id"], arguments["term"], arguments["study_level"]
    holder = student(database, student_id)
    if not TERM.match(term):
        raise ToolFailure(f"invalid argument term: {term!r} is not YYYY-TERM (e.g. 2025-SPRING)")
    picks = arguments["courses"]
    distinct([pick["course_id"] for pick in picks], "courses")
    chosen = [course(database, pick["course_id"]) for pick in picks]
    for record in chosen:
        require_term(record, term)
        require_open(record)
    require_no_conflict(chosen)
    lines = [
        course_line(record, pick.get("grading_option", "letter"), level)
        for record, pick in zip(chosen, picks, strict=True)
    ]
    fee = HEALTH_FEE if arguments["health_insurance"] == "yes" else 0.0
    total = money(sum(line["tuition"] for line in lines) + fee)
    payments = arguments["payments"]
    for index, payment in enumerate(payments):
        saved_method(holder, payment["payment_id"], f"payments.{index}.payment_id")
        name = f"payments.{index}.amount"
        positive_amount({name: payment["amount"]}, name)
    paid = money(sum(float(payment["amount"]) for payment in payments))
    if paid != total:
        raise ToolFailure(
            f"payments sum to {fact_text(paid)} but the total due is {fact_text(total)} (tuition "
            f"{fact_text(money(total - fee))} + health insurance fee {fact_text(fee)}); an initial "
            "registration must be paid exactly in full"
        )
    key = new_key(database, REGISTRATIONS, 7)
    program = holder.get("program") or {}
    record = {
        "registration_id": key,
        "student_id": student_id,
        "campus": (chosen[0].get("location") or {}).get("campus"),
        "program": f"{program.get('degree', '')} {program.get('major', '')}".strip(),
        "study_level": level,
        "term": term,
        **load(lines),
        "courses": lines,
        "advisors": [],
        "created_at": TODAY,
        "payment_history": [{"payment_id": p["payment_id"], "amount": money(float(p["amount"]))} for p in payments],
        "financial_aid": {"scholarships": 0, "grants": 0, "loans": 0},
        "health_insurance": arguments["health_insurance"],
    }
    database.create(REGISTRATIONS, key, record)
    database.update(STUDENTS, student_id, "registrations", [*(holder.get("registrations") or []), key])
    enroll(database, [record["course_id"] for record in chosen], 1)
    return {"registration_id": key, "total_due": total, "registration": record}


def changed_lines(database: Database, record: dict[str, Any], arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """The registration's course lines after the drops, grading changes and adds, each checked."""
    lines, key = {line["course_id"]: dict(line) for line in record.get("courses") or []}, record["registration_id"]
    drops, adds = arguments.get("drop_course_ids") or [], arguments.get("add_courses") or []
    changes = arguments.get("grading_changes") or []
    distinct(drops, "drop_course_ids")
    distinct([pick["course_id"] for pick in adds], "add_courses")
    distinct([change["course_id"] for change in changes], "grading_changes")
    for course_id in drops:
        if lines.pop(course_id, None) is None:
            raise ToolFailure(f"drop_course_ids: course {course_id!r} is not in registration {key!r}")
    for change in changes:
        line, option = lines.get(change["course_id"]), change["grading_option"]
        if line is None:
            raise ToolFailure(f"grading_changes: course {change['course_id']!r} is not a kept course of {key!r}")
        if line.get("grading_option") == option:
            raise ToolFailure(f"grading_changes: course {change['course_id']!r} already has grading option {option!r}")
        line["grading_option"] = option
    registered = {line["course_id"] for line in record.get("courses") or []}
    for pick in adds:
        if pick["course_id"] in registered:
            raise ToolFailure(f"add_courses: course {pick['course_id']!r} is already in registration {key!r}")
        added = course(database, pick["course_id"])
        require_term(added, record["term"])
        require_open(added)
        lines[added["course_id"]] = course_line(added, pick.get("grading_option", "letter"), record["study_level"])
    if not lines:
        raise ToolFailure("a registration keeps at least one course; to drop every course, cancel the registration")
    require_no_conflict([course(database, course_id) for course_id in lines])
    return list(lines.values())


def settle(
    holder: dict[str, Any], record: dict[str, Any], difference: float, payment_id: str | None
) -> dict[str, Any] | None:
    """The payment-history entry for a tuition difference (None when there is none)."""
    history = record.get("payment_history") or []
    if difference == 0 and payment_id is not None:
        raise ToolFailure("invalid argument payment_id: the tuition does not change; nothing to charge or refund")
    if difference > 0 and payment_id is None:
        raise ToolFailure(
            f"the tuition increases by {fact_text(difference)}: a single saved payment method "
            "(payment_id) is required for the charge"
        )
    if payment_id is not None and (difference > 0 or payment_id not in {e.get("payment_id") for e in history}):
        saved_method(holder, payment_id, "payment_id")  # refunds may also go back to a payment of the history
    if difference < 0 and payment_id is None:
        paid = [entry["payment_id"] for entry in history if float(entry.get("amount", 0)) > 0]
        if not paid:
            raise ToolFailure("no payment in the history to refund to: give a saved payment_id")
        payment_id = paid[-1]
    return {"payment_id": payment_id, "amount": difference} if difference else None


def modify_registration(database: Database, arguments: dict[str, Any]) -> Any:
    student_id, registration_id = arguments["student_id"], arguments["registration_id"]
    record = own_registration(database, student_id, registration_id)
    insurance = arguments.get("health_insurance")
    if insurance is not None and insurance != record.get("health_insurance"):
        raise ToolFailure(
            f"health insurance cannot be changed after the initial registration (it is "
            f"{record.get('health_insurance')!r} for {registration_id!r})"
        )
    if not any(arguments.get(name) for name in ("add_courses", "drop_course_ids", "grading_changes")):
        raise ToolFailure("nothing to change: give add_courses, drop_course_ids or grading_changes")
    lines = changed_lines(database, record, arguments)
    old = record.get("courses") or []
    difference = money(sum(float(line["tuition"]) for line in lines) - sum(float(line["tuition"]) for line in old))
    entry = settle(student(database, student_id), record, difference, arguments.get("payment_id"))
    before, after = {line["course_id"] for line in old}, {line["course_id"] for line in lines}
    database.update(REGISTRATIONS, registration_id, "courses", lines)
    if before != after:  # status and overload follow the credits, which only adds and drops change
        for name, value in load(lines).items():
            database.update(REGISTRATIONS, registration_id, name, value)
    if entry:
        database.update(
            REGISTRATIONS, registration_id, "payment_history", [*(record.get("payment_history") or []), entry]
        )
    enroll(database, sorted(after - before), 1)
    enroll(database, sorted(before - after), -1)
    return {
        "registration_id": registration_id,
        "tuition_difference": difference,
        "payment": entry,
        "registration": database.get(REGISTRATIONS, registration_id),
    }


def cancel_registration(database: Database, arguments: dict[str, Any]) -> Any:
    student_id, registration_id = arguments["student_id"], arguments["registration_id"]
    record = own_registration(database, student_id, registration_id)
    net: dict[str, float] = {}  # per payment_id, what is still paid (earlier refunds count against it)
    for entry in record.get("payment_history") or []:
        net[entry["payment_id"]] = net.get(entry["payment_id"], 0.0) + float(entry.get("amount", 0))
    refunds = [
        {"payment_id": payment_id, "amount": money(-amount)} for payment_id, amount in net.items() if money(amount) > 0
    ]
    dropped = [line["course_id"] for line in record.get("courses") or []]
    database.update(
        REGISTRATIONS, registration_id, "payment_history", [*(record.get("payment_history") or []), *refunds]
    )
    database.update(REGISTRATIONS, registration_id, "courses", [])
    for name, value in {"total_credits": 0, "overload_credits": 0, "status": CANCELED}.items():
        database.update(REGISTRATIONS, registration_id, name, value)
    enroll(database, dropped, -1)
    return {"registration_id": registration_id, "status": CANCELED, "dropped_course_ids": dropped, "refunds": refunds}


def specs(domain: Domain) -> list[ToolSpec]:
    write = writes_on(REGISTRATIONS, "registration_id", {"student_id": TEXT, "registration_id": TEXT})
    rates = ", ".join(f"{level} {fact_text(rate)}" for level, rate in RATE_PER_CREDIT.items())
    return [
        write_spec(
            "register_courses",
            "Register a student for courses of one term: courses open, no schedule "
            f"conflict; tuition per course = credits x rate per credit ({rates}); health insurance 'yes' adds "
            f"{fact_text(HEALTH_FEE)}; payments (saved payment methods) must sum exactly to the total due. "
            "Grading defaults to letter.",
            object_schema(
                {
                    "student_id": TEXT,
                    "term": {"type": "string", "minLength": 1, "description": "YYYY-TERM, e.g. 2025-SPRING"},
                    "study_level": {"type": "string", "enum": list(LEVELS)},
                    "courses": {"type": "array", "minItems": 1, "items": PICK_SCHEMA},
                    "health_insurance": YES_NO,
                    "payments": {
                        "type": "array",
                        "minItems": 1,
                        "items": object_schema({"payment_id": TEXT, "amount": AMOUNT_SCHEMA}),
                    },
                }
            ),
            register_courses,
            REGISTRATIONS,
            "student_id",
        ),
        write(
            "modify_registration",
            "Add courses (same term, open; priced like register_courses), drop "
            "courses and/or change grading options of a student's registration; no schedule conflict. A tuition "
            "increase is charged to payment_id (a saved payment method); a decrease is refunded as a negative "
            "amount (to payment_id if given, else the latest payment). Health insurance cannot change.",
            {},
            modify_registration,
            {
                "add_courses": {"type": "array", "items": PICK_SCHEMA},
                "drop_course_ids": {"type": "array", "items": TEXT},
                "grading_changes": {
                    "type": "array",
                    "items": object_schema(
                        {"course_id": TEXT, "grading_option": {"type": "string", "enum": list(GRADING)}}
                    ),
                },
                "payment_id": TEXT,
                "health_insurance": YES_NO,
            },
        ),
        write(
            "cancel_registration",
            "Cancel a student's registration: all courses dropped, every payment "
            "refunded as a negative amount to its payment_id.",
            {},
            cancel_registration,
        ),
    ]


# --- tasks -----------------------------------------------------------------------------------------
def method_text(method: dict[str, Any], methods: dict[str, Any]) -> str:
    """How a student names a saved method: brand and last four, or with its id when that is ambiguous."""

    def four(m: dict[str, Any]) -> Any:
        return (m.get("extra_info") or {}).get("last_four")

    text = f"{(method.get('extra_info') or {}).get('brand') or 'bank account'} ending in {four(method)}"
    unique = [four(m) for m in methods.values()].count(four(method)) == 1
    return text if unique else f"{text} ({method['payment_method_id']})"


class SchoolDrafter(Drafter):
    """Drafts for one student about their first registration: a cancellation, drops, adds, grading changes, a new
    registration for the other term, and refusals where the policy forbids the request."""

    def __init__(self, generator: Generator, student_id: str, record: dict[str, Any], registration_id: str) -> None:
        self.rng, self.student_id, self.record = generator.rng, student_id, record
        self.catalog = generator.domain.base[COURSES]
        self.registration_id = registration_id
        self.registration = generator.domain.base[REGISTRATIONS][registration_id]
        name = record["name"]
        super().__init__(
            f"{STUDENTS}/{student_id}", f"Hi, I'm {name['first_name']} {name['last_name']}, student id {student_id}."
        )
        self.methods = record.get("payment_methods") or {}
        self.lines = self.registration.get("courses") or []

    def mine(self) -> tuple[str, list[dict[str, Any]]]:
        """How the student names the registration, and the reads that find it (some don't know its id)."""
        read = action("get_registration", registration_id=self.registration_id)
        if self.rng.random() < 0.3:
            return (
                f"my {self.registration['term']} registration (I don't have its id)",
                [action("get_student", student_id=self.student_id), read],
            )
        return f"my registration {self.registration_id}", [read]

    def with_student(self, reads: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The reads plus the student record (its saved payment methods), unless they already hold it."""
        student_read = action("get_student", student_id=self.student_id)
        return reads if student_read in reads else [*reads, student_read]

    def modify(self, **changes: Any) -> dict[str, Any]:
        return action(
            "modify_registration", student_id=self.student_id, registration_id=self.registration_id, **changes
        )

    def method(self) -> tuple[str, str]:
        payment_id = self.rng.choice(sorted(self.methods))
        return payment_id, method_text(self.methods[payment_id], self.methods)

    def cancel_tasks(self, others: list[str]) -> list[Draft]:
        which, reads = self.mine()
        call = action("cancel_registration", student_id=self.student_id, registration_id=self.registration_id)
        drafts = [self.write(f"Please cancel {which} and refund my payments.", [*reads, call])]
        if others and self.rng.random() < 0.3:  # someone else's registration: the tool refuses it
            other = self.rng.choice(others)
            call = action("cancel_registration", student_id=self.student_id, registration_id=other)
            read = action("get_registration", registration_id=other)
            drafts.append(self.refuse(f"Please cancel registration {other}.", [read], call, "registration_id"))
        return drafts

    def drop_task(self) -> list[Draft]:
        if len(self.lines) < 2:
            return []
        line, (which, reads) = self.rng.choice(self.lines), self.mine()
        request = f"Please drop {line['course_code']} ({line['course_id']}) from {which}."
        if self.methods and line.get("tuition") and self.rng.random() < 0.3:  # a refund to a named method
            payment_id, text = self.method()
            call = self.modify(drop_course_ids=[line["course_id"]], payment_id=payment_id)
            return [self.write(f"{request} Refund the tuition to my {text}.", [*self.with_student(reads), call])]
        return [self.write(request, [*reads, self.modify(drop_course_ids=[line["course_id"]])])]

    def grading_task(self) -> list[Draft]:
        line, (which, reads) = self.rng.choice(self.lines), self.mine()
        option = self.rng.choice([option for option in GRADING if option != line.get("grading_option")])
        call = self.modify(grading_changes=[{"course_id": line["course_id"], "grading_option": option}])
        return [
            self.write(
                f"Please change the grading option of {line['course_code']} "
                f"({line['course_id']}) in {which} to {option}.",
                [*reads, call],
            )
        ]

    def add_tasks(self) -> list[Draft]:
        term, held = self.registration["term"], [self.catalog[line["course_id"]] for line in self.lines]
        registered = {record["course_id"] for record in held}
        same_term = [c for c in self.catalog.values() if c["term"] == term and c["course_id"] not in registered]
        fits = [c for c in same_term if not any(clash(c, other) for other in held)]
        kinds = {
            "open": [c for c in fits if c["current_enrollment"] < c["capacity"]],
            "full": [c for c in fits if c["current_enrollment"] >= c["capacity"]],
            "conflict": [c for c in same_term if c not in fits and c["current_enrollment"] < c["capacity"]],
            "term": [c for c in self.catalog.values() if c["term"] != term],
        }
        drafts = []
        if kinds["open"] and self.methods:
            drafts.append(self.add_draft(self.rng.choice(kinds["open"]), "action_write"))
        refusals = [kind for kind in ("full", "conflict", "term") if kinds[kind]]
        if refusals and self.methods and self.rng.random() < 0.6:
            drafts.append(self.add_draft(self.rng.choice(kinds[self.rng.choice(refusals)]), "action_refusal"))
        return drafts

    def add_draft(self, added: dict[str, Any], family: str) -> Draft:
        grading = self.rng.choice(["letter", "letter", "pass/fail", "audit"])
        (which, reads), (payment_id, text) = self.mine(), self.method()
        request = (
            f"Please add {added['course_code']} ({added['course_id']}) with {grading} grading to {which}; "
            f"charge any extra tuition to my {text}."
        )
        reads = self.with_student([*reads, action("get_course", course_id=added["course_id"])])
        call = self.modify(
            add_courses=[{"course_id": added["course_id"], "grading_option": grading}], payment_id=payment_id
        )
        return self.decide(family == "action_write", request, reads, call, "registration_id")

    def insurance_task(self) -> list[Draft]:
        if self.rng.random() >= 0.4:
            return []
        which, reads = self.mine()
        wanted = "no" if self.registration.get("health_insurance") == "yes" else "yes"
        request = (
            f"Please remove the health insurance from {which}."
            if wanted == "no"
            else f"Please add health insurance to {which}."
        )
        return [self.refuse(request, reads, self.modify(health_insurance=wanted), "registration_id")]

    def register_tasks(self) -> list[Draft]:
        """A registration for the other term: done right (half of the students), or (a quarter) paid only in
        part, mixed with a course of another term, or with a full or conflicting course, refused."""
        term = "2025-FALL" if self.registration["term"] != "2025-FALL" else "2025-SPRING"
        open_courses = [
            c for c in self.catalog.values() if c["term"] == term and c["current_enrollment"] < c["capacity"]
        ]
        draw = self.rng.random()
        if not open_courses or not self.methods or draw >= 0.75:
            return []
        first = self.rng.choice(open_courses)
        chosen = [first]
        partners = [c for c in open_courses if c is not first and not clash(first, c)]
        if partners and self.rng.random() < 0.5:
            chosen.append(self.rng.choice(partners))
        insurance, level = self.rng.choice(["yes", "no"]), self.registration["study_level"]
        total = money(sum(tuition(c, level) for c in chosen) + (HEALTH_FEE if insurance == "yes" else 0))
        payment_id, text = self.method()
        payments, pay_text = [{"payment_id": payment_id, "amount": total}], f"pay the full total due with my {text}"
        refused = draw >= 0.5
        if refused and self.rng.random() < 0.5:  # pay part now: an initial registration is paid in full
            part = money(round(total / 2, -2))
            payments = [{"payment_id": payment_id, "amount": part}]
            pay_text = f"pay only {fact_text(part)} now with my {text} and the rest later"
        elif refused:  # with a course that is full, conflicts or is of another term
            chosen = [
                first,
                self.rng.choice(
                    [
                        c
                        for c in self.catalog.values()
                        if c not in chosen
                        and (c["term"] != term or c["current_enrollment"] >= c["capacity"] or clash(first, c))
                    ]
                ),
            ]
            total = money(sum(tuition(c, level) for c in chosen) + (HEALTH_FEE if insurance == "yes" else 0))
            payments = [{"payment_id": payment_id, "amount": total}]
        picks = [
            {"course_id": c["course_id"], "grading_option": self.rng.choice(["letter", "letter", "pass/fail"])}
            for c in chosen
        ]
        listed = ", ".join(
            f"{c['course_code']} ({c['course_id']}, {p['grading_option']})" for c, p in zip(chosen, picks, strict=True)
        )
        request = (
            f"Please register me for {term} at study level {level} in {listed}; health insurance: {insurance}; "
            f"{pay_text}."
        )
        reads = [
            action("get_student", student_id=self.student_id),
            *[action("get_course", course_id=c["course_id"]) for c in chosen],
        ]
        call = action(
            "register_courses",
            student_id=self.student_id,
            term=term,
            study_level=level,
            courses=picks,
            health_insurance=insurance,
            payments=payments,
        )
        return [self.decide(not refused, request, reads, call, "student_id")]


def drafts(generator: Generator) -> list[Draft]:
    """Per student with a registration: the tasks of `SchoolDrafter` (students name themselves by
    student_id, so no email needs to be unique)."""
    base = generator.domain.base
    found: list[Draft] = []
    for student_id, record in base[STUDENTS].items():
        owned = [key for key in record.get("registrations") or [] if key in base[REGISTRATIONS]]
        if not owned:
            continue
        drafter = SchoolDrafter(generator, student_id, record, owned[0])
        others = [key for key, other in base[REGISTRATIONS].items() if other.get("student_id") != student_id]
        found += drafter.cancel_tasks(others)
        found += drafter.drop_task()
        found += drafter.grading_task()
        found += drafter.add_tasks()
        found += drafter.insurance_task()
        found += drafter.register_tasks()
    return found
