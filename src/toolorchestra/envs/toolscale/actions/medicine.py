"""Medicine (pharmacy) policy actions (medicine/policy.md, "Fill Prescription", "Update Prescription
Status", "Transfer Prescription", "Set Counseling Offered", "Add Prescription Payment", "Cancel
Prescription", and "Manage payment methods" for the saved-method rule) and the tasks that use them.

Every action takes the patient_id the user gave ("Always obtain the patient id before performing any patient
or prescription operation") and the prescription must be one of that patient's. A canceled, transferred or
expired prescription is closed: it takes no fill, status change, transfer, payment or cancellation.
- fill_prescription(patient_id, prescription_id, pharmacist_id, items, insurance, payments): the prescription
  is active or filled; each item's medication_id is in its medication orders (once), quantity_dispensed at
  most the ordered quantity; on a refill (the prescription was dispensed before) the order needs a refill
  remaining; the lot is one of that medication's batches, not expired (policy clock 24-05-15), its
  expiration_date as given and its inventory sufficient; insurance_paid <= billed_amount; every payment's
  payment_id is saved in the patient's profile and the payments sum exactly to patient_copay + max(0, item
  prices - billed_amount). Effects: lot inventory decremented, refills_remaining decremented for dispensed
  orders that have some, a dispense with the new fill_id `FILL-<prescription_id>-<n>`, the payments
  appended to payment_history, status filled;
- update_prescription_status(patient_id, prescription_id, status): active, on-hold or filled (canceled and
  transferred go through their own actions, which refund or record the new pharmacy); a new status; filled
  only with a recorded fill;
- transfer_prescription(patient_id, prescription_id, pharmacy): to another pharmacy (id, name, address);
  status transferred;
- set_counseling_offered(patient_id, prescription_id, counseling_offered): yes or no, a change;
- add_prescription_payment(patient_id, prescription_id, payment_id, amount): amount > 0, payment_id saved in
  the patient's profile; appended to payment_history;
- cancel_prescription(patient_id, prescription_id): status canceled; each payment_id's net paid amount gets a
  negative refund entry to the same payment_id (insurance claims are not reversed, as the policy says).

Left out: create_prescription (a long free-form record: pharmacy, prescriber, every order field, which a
task would have to dictate field by field), reverse_insurance_claim (the policy gives no limit on how much
may be reversed or refunded, so the tool could only record what it is told), the profile writes (contact,
insurance, adding/removing payment methods), search_medications and the inventory summary (get_medication
and the derived list tools show the same data), transfer_to_human_agents and the confirmation step. Dates
against the clock: every prescription in the data expires after 24-05-15, so only the expired status closes
one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolorchestra.envs.toolscale.actions.shared import AMOUNT_SCHEMA, existing, money, positive_amount
from toolorchestra.envs.toolscale.drafts import Draft, Drafter, action, fact_text
from toolorchestra.envs.toolscale.tools import TEXT, ToolFailure, ToolSpec, object_schema, writes_on

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Database, Domain
    from toolorchestra.envs.toolscale.tasks import Generator

PATIENTS, PRESCRIPTIONS, MEDICATIONS = "patients", "prescriptions", "medications"
NOW_EST, TODAY = "24-05-15-15-00", "24-05-15"  # the policy's clock in the data's YY-MM-DD(-HH-MM) format
CLOSED = ("canceled", "transferred", "expired")
FILLABLE = ("active", "filled")
SETTABLE = ("active", "on-hold", "filled")
DATE = {"type": "string", "pattern": r"^\d\d-\d\d-\d\d$", "description": "YY-MM-DD"}
PRICE = {"type": "number", "minimum": 0}
OWNED = {"patient_id": TEXT, "prescription_id": TEXT}
ITEMS_SCHEMA = {
    "type": "array",
    "minItems": 1,
    "items": object_schema(
        {
            "medication_id": TEXT,
            "quantity_dispensed": {"type": "integer", "minimum": 1},
            "lot_number": TEXT,
            "expiration_date": DATE,
            "price": PRICE,
        }
    ),
}
INSURANCE_SCHEMA = object_schema(
    {"billed_amount": PRICE, "insurance_paid": PRICE, "patient_copay": PRICE}, {"prior_authorization_id": TEXT}
)
PAYMENTS_SCHEMA = {"type": "array", "items": object_schema({"payment_id": TEXT, "amount": AMOUNT_SCHEMA})}
ADDRESS_SCHEMA = object_schema({name: TEXT for name in ("street", "city", "state", "zip")})
PHARMACY_SCHEMA = object_schema({"pharmacy_id": TEXT, "name": TEXT, "address": ADDRESS_SCHEMA})


# --- checks ----------------------------------------------------------------------------------------
def owned_prescription(database: Database, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    patient_id, key = arguments["patient_id"], arguments["prescription_id"]
    existing(database, PATIENTS, patient_id, "patient_id")
    record = existing(database, PRESCRIPTIONS, key, "prescription_id")
    if record.get("patient_id") != patient_id:
        raise ToolFailure(f"prescription {key!r} is not a prescription of patient {patient_id!r}")
    return key, record


def require_open(key: str, record: dict[str, Any], doing: str) -> None:
    if record.get("status") in CLOSED:
        raise ToolFailure(
            f"prescription {key!r} is {record.get('status')}; a {', '.join(CLOSED)} prescription allows no {doing}"
        )


def saved_method(database: Database, patient_id: str, payment_id: str) -> None:
    """The policy's safety rule: payments go only to methods already saved in the patient's profile."""
    if payment_id not in (existing(database, PATIENTS, patient_id, "patient_id").get("payment_methods") or {}):
        raise ToolFailure(
            f"payment_id {payment_id!r} is not a payment method saved in the profile of patient "
            f"{patient_id!r}; add it to the profile first"
        )


def lot(database: Database, medication_id: str, lot_number: str) -> tuple[str, dict[str, Any]]:
    """(batch key, batch) of the medication's batch with this lot number."""
    batches = (existing(database, MEDICATIONS, medication_id, "medication_id").get("batches") or {}).items()
    found = next(((k, b) for k, b in batches if isinstance(b, dict) and b.get("lot_number") == lot_number), None)
    if found is None:
        raise ToolFailure(f"lot_number {lot_number!r} is not a lot of medication {medication_id!r}")
    return found


def dispensed_line(
    database: Database, key: str, refill: bool, order: dict[str, Any] | None, item: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """Checks one dispensed item against its order and lot; (batch key, the stored item)."""
    medication_id, quantity, lot_number = item["medication_id"], int(item["quantity_dispensed"]), item["lot_number"]
    if order is None:
        raise ToolFailure(f"medication_id {medication_id!r} is not in the medication orders of prescription {key!r}")
    if refill and int(order.get("refills_remaining") or 0) <= 0:
        raise ToolFailure(f"no refills remaining for medication {medication_id!r} on prescription {key!r}")
    if quantity > int(order.get("quantity") or 0):
        raise ToolFailure(
            f"quantity_dispensed {quantity} exceeds the ordered quantity {order.get('quantity')} "
            f"of medication {medication_id!r}"
        )
    batch_key, batch = lot(database, medication_id, lot_number)
    if item["expiration_date"] != batch.get("expiration_date"):
        raise ToolFailure(
            f"expiration_date {item['expiration_date']!r} does not match lot {lot_number!r} "
            f"(expires {batch.get('expiration_date')})"
        )
    if str(batch.get("expiration_date")) < TODAY:
        raise ToolFailure(f"lot {lot_number!r} expired on {batch.get('expiration_date')}")
    if quantity > int(batch.get("quantity_units") or 0):
        raise ToolFailure(
            f"insufficient inventory in lot {lot_number!r}: {batch.get('quantity_units')} units, {quantity} requested"
        )
    price = positive_amount(item, "price", allow_zero=True)
    return batch_key, {
        "medication_id": medication_id,
        "quantity_dispensed": quantity,
        "lot_number": lot_number,
        "expiration_date": item["expiration_date"],
        "price": money(price),
    }


# --- tools -----------------------------------------------------------------------------------------
def fill_prescription(database: Database, arguments: dict[str, Any]) -> Any:
    key, record = owned_prescription(database, arguments)
    if record.get("status") not in FILLABLE:
        raise ToolFailure(
            f"prescription {key!r} is {record.get('status')}; only active or filled prescriptions can be filled"
        )
    orders = {order.get("medication_id"): order for order in record.get("medication_orders") or []}
    ids = [item["medication_id"] for item in arguments["items"]]
    twice = next((medication for medication in ids if ids.count(medication) > 1), None)
    if twice:
        raise ToolFailure(f"invalid argument items: medication_id {twice!r} is listed twice")
    dispenses = list(record.get("dispenses") or [])
    lines = [
        dispensed_line(database, key, bool(dispenses), orders.get(item["medication_id"]), item)
        for item in arguments["items"]
    ]
    insurance = arguments["insurance"]
    billed, paid, copay = (
        positive_amount(insurance, name, allow_zero=True)
        for name in ("billed_amount", "insurance_paid", "patient_copay")
    )
    if paid > billed:
        raise ToolFailure(f"insurance_paid {paid} exceeds billed_amount {billed}")
    uncovered = money(max(0.0, sum(line["price"] for _, line in lines) - billed))
    expected = money(copay + uncovered)
    for payment in arguments["payments"]:
        saved_method(database, arguments["patient_id"], payment["payment_id"])
        positive_amount(payment)
    total = money(sum(float(payment["amount"]) for payment in arguments["payments"]))
    if total != expected:
        raise ToolFailure(
            f"patient payments sum to {total}; they must equal the expected patient amount {expected} "
            f"(patient_copay {copay} + uncovered amount {uncovered})"
        )
    for batch_key, line in lines:  # inventory leaves the lots
        units = lot(database, line["medication_id"], line["lot_number"])[1]["quantity_units"]
        database.update(
            MEDICATIONS,
            line["medication_id"],
            ["batches", batch_key, "quantity_units"],
            units - line["quantity_dispensed"],
        )
    dispensed = set(ids)
    new_orders = [
        {**order, "refills_remaining": int(order["refills_remaining"]) - 1}
        if order.get("medication_id") in dispensed and int(order.get("refills_remaining") or 0) > 0
        else order
        for order in record.get("medication_orders") or []
    ]
    fill_id = f"FILL-{key}-{len(dispenses) + 1}"
    dispense = {
        "fill_id": fill_id,
        "date_filled_est": NOW_EST,
        "pharmacist_id": arguments["pharmacist_id"],
        "items": [line for _, line in lines],
        "insurance": {
            "billed_amount": money(billed),
            "insurance_paid": money(paid),
            "patient_copay": money(copay),
            "prior_authorization_id": insurance.get("prior_authorization_id"),
            "reversals": [],
        },
    }
    entries = [{"payment_id": p["payment_id"], "amount": money(float(p["amount"]))} for p in arguments["payments"]]
    database.update(PRESCRIPTIONS, key, "medication_orders", new_orders)
    database.update(PRESCRIPTIONS, key, "dispenses", [*dispenses, dispense])
    database.update(PRESCRIPTIONS, key, "payment_history", [*(record.get("payment_history") or []), *entries])
    database.update(PRESCRIPTIONS, key, "status", "filled")
    return {
        "prescription_id": key,
        "fill_id": fill_id,
        "status": "filled",
        "patient_amount": expected,
        "payments": entries,
    }


def update_prescription_status(database: Database, arguments: dict[str, Any]) -> Any:
    key, record = owned_prescription(database, arguments)
    status, old = arguments["status"], record.get("status")
    if status in ("canceled", "transferred"):
        raise ToolFailure(
            f"status {status!r} is set by {'cancel' if status == 'canceled' else 'transfer'}"
            "_prescription (refunds or the new pharmacy), not by a status update"
        )
    if status not in SETTABLE:
        raise ToolFailure(f"invalid argument status: {status!r}; expected one of {', '.join(SETTABLE)}")
    require_open(key, record, "status change")
    if status == old:
        raise ToolFailure(f"prescription {key!r} is already {old}")
    if status == "filled" and not record.get("dispenses"):
        raise ToolFailure(f"prescription {key!r} has no recorded fill; use fill_prescription to fill it")
    database.update(PRESCRIPTIONS, key, "status", status)
    return {"prescription_id": key, "old_status": old, "status": status}


def transfer_prescription(database: Database, arguments: dict[str, Any]) -> Any:
    key, record = owned_prescription(database, arguments)
    require_open(key, record, "transfer")
    pharmacy = arguments["pharmacy"]
    if pharmacy["pharmacy_id"] == (record.get("pharmacy") or {}).get("pharmacy_id"):
        raise ToolFailure(
            f"prescription {key!r} is already at pharmacy {pharmacy['pharmacy_id']!r}; a transfer "
            "needs another pharmacy"
        )
    new = {"pharmacy_id": pharmacy["pharmacy_id"], "name": pharmacy["name"], "address": dict(pharmacy["address"])}
    database.update(PRESCRIPTIONS, key, "pharmacy", new)
    database.update(PRESCRIPTIONS, key, "status", "transferred")
    return {"prescription_id": key, "pharmacy": new, "status": "transferred"}


def set_counseling_offered(database: Database, arguments: dict[str, Any]) -> Any:
    key, record = owned_prescription(database, arguments)
    value = arguments["counseling_offered"]
    if value not in ("yes", "no"):
        raise ToolFailure(f"invalid argument counseling_offered: {value!r}; expected yes or no")
    if record.get("counseling_offered") == value:
        raise ToolFailure(f"counseling_offered of prescription {key!r} is already {value!r}")
    database.update(PRESCRIPTIONS, key, "counseling_offered", value)
    return {"prescription_id": key, "counseling_offered": value}


def add_prescription_payment(database: Database, arguments: dict[str, Any]) -> Any:
    key, record = owned_prescription(database, arguments)
    amount = positive_amount(arguments)
    require_open(key, record, "payment")
    saved_method(database, arguments["patient_id"], arguments["payment_id"])
    entry = {"payment_id": arguments["payment_id"], "amount": money(amount)}
    database.update(PRESCRIPTIONS, key, "payment_history", [*(record.get("payment_history") or []), entry])
    return {"prescription_id": key, "payment": entry}


def cancel_prescription(database: Database, arguments: dict[str, Any]) -> Any:
    key, record = owned_prescription(database, arguments)
    require_open(key, record, "cancellation")
    history = list(record.get("payment_history") or [])
    net: dict[str, float] = {}  # per payment id, what is still paid (earlier refunds are negative entries)
    for entry in history:
        net[entry["payment_id"]] = net.get(entry["payment_id"], 0.0) + float(entry.get("amount") or 0)
    refunds = [
        {"payment_id": payment_id, "amount": money(-amount)} for payment_id, amount in net.items() if money(amount) > 0
    ]
    database.update(PRESCRIPTIONS, key, "payment_history", [*history, *refunds])
    database.update(PRESCRIPTIONS, key, "status", "canceled")
    return {"prescription_id": key, "status": "canceled", "refunds": refunds}


def specs(domain: Domain) -> list[ToolSpec]:
    write = writes_on(PRESCRIPTIONS, "prescription_id", OWNED)
    # status and counseling_offered are plain strings: a value outside the policy's fails with the rule's message
    return [
        write(
            "fill_prescription",
            "Dispense the patient's active or filled prescription: items from lots of the "
            "ordered medications, insurance amounts, and payments from saved methods summing to patient_copay + "
            "max(0, item prices - billed_amount). Records a new fill and sets the status filled.",
            {"pharmacist_id": TEXT, "items": ITEMS_SCHEMA, "insurance": INSURANCE_SCHEMA, "payments": PAYMENTS_SCHEMA},
            fill_prescription,
        ),
        write(
            "update_prescription_status",
            "Set the status of the patient's prescription to active, on-hold or "
            "filled (cancel and transfer have their own actions).",
            {"status": TEXT},
            update_prescription_status,
        ),
        write(
            "transfer_prescription",
            "Move the patient's prescription to another pharmacy; status transferred.",
            {"pharmacy": PHARMACY_SCHEMA},
            transfer_prescription,
        ),
        write(
            "set_counseling_offered",
            "Record whether counseling was offered (yes or no) for the patient's prescription.",
            {"counseling_offered": TEXT},
            set_counseling_offered,
        ),
        write(
            "add_prescription_payment",
            "Append a payment from a payment method saved in the patient's profile "
            "to the prescription's payment history.",
            {"payment_id": TEXT, "amount": AMOUNT_SCHEMA},
            add_prescription_payment,
        ),
        write(
            "cancel_prescription",
            "Cancel the patient's prescription; every payment is refunded to the same "
            "payment id (insurance claims are not reversed).",
            {},
            cancel_prescription,
        ),
    ]


# --- tasks -----------------------------------------------------------------------------------------
PAYMENT_AMOUNTS = (5.0, 10.0, 15.0, 20.0, 25.0, 40.0)
FILL_REFUSAL_SHARE = 0.35  # of the fillable prescriptions, the share also asked a fill the policy forbids
TRANSFER_SHARE = 0.5
FOREIGN_SHARE = 0.25  # of the patients, the share asking to cancel another patient's prescription


class MedicineDrafter(Drafter):
    """Drafts for one prescription's patient, who gives their patient id (the policy's identification): the
    gold reads the prescription (and the profile and medications where the write depends on them)."""

    def __init__(self, generator: Generator, key: str, record: dict[str, Any], writes: list[str]) -> None:
        self.rng, self.key, self.record, self.writes = generator.rng, key, record, writes
        self.base = generator.domain.base
        self.patient_id = record["patient_id"]
        self.patient = self.base[PATIENTS][self.patient_id]
        self.methods = list(self.patient.get("payment_methods") or {})
        self.read = action("get_prescription", prescription_id=key)
        self.profile = action("get_patient", patient_id=self.patient_id)
        name = self.patient.get("name") or {}
        hello = f"Hi, I'm {name.get('first_name')} {name.get('last_name')}, patient id {self.patient_id}."
        super().__init__(f"{PATIENTS}/{self.patient_id}", hello)

    def refuse(
        self, request: str, reads: list[dict[str, Any]], call: dict[str, Any], argument: str, also: Sequence[str] = ()
    ) -> Draft:
        """A refusal forbids every write on the call's prescription (`writes`), not only the call's own."""
        target = call["arguments"][argument]
        return self.draft("action_refusal", request, reads, call, [(name, argument, target) for name in self.writes])

    def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        return action(name, patient_id=self.patient_id, prescription_id=self.key, **arguments)

    def closed(self) -> bool:
        return self.record.get("status") in CLOSED

    def other_method(self) -> str | None:
        """A payment method id saved by another patient only (what the user wrongly offers)."""
        others = sorted(
            {m for p in self.base[PATIENTS].values() for m in p.get("payment_methods") or {}} - set(self.methods)
        )
        return self.rng.choice(others) if others else None

    # --- fills
    def fill_items(self) -> list[dict[str, Any]] | None:
        """One item per order: the full ordered quantity from a usable lot, priced as the last dispense of the
        medication (or its suggested retail price, per unit when it is a unit price)."""
        items = []
        for order in self.record.get("medication_orders") or []:
            medication = self.base[MEDICATIONS].get(order["medication_id"]) or {}
            quantity = int(order["quantity"])
            lots = [
                b
                for b in (medication.get("batches") or {}).values()
                if b["expiration_date"] >= TODAY and int(b["quantity_units"]) >= quantity
            ]
            if not lots:
                return None
            batch = self.rng.choice(lots)
            earlier = [
                i["price"]
                for d in self.record.get("dispenses") or []
                for i in d["items"]
                if i["medication_id"] == order["medication_id"]
            ]
            retail = float((medication.get("pricing") or {}).get("suggested_retail_price") or 10.0)
            price = money(earlier[-1] if earlier else retail * quantity if retail < 5 else retail)
            items.append(
                {
                    "medication_id": order["medication_id"],
                    "quantity_dispensed": quantity,
                    "lot_number": batch["lot_number"],
                    "expiration_date": batch["expiration_date"],
                    "price": price,
                }
            )
        return items

    def fill_request(
        self, items: list[dict[str, Any]], insurance: dict[str, float], pharmacist: str, payments: list[dict[str, Any]]
    ) -> str:
        lines = "; ".join(
            f"{i['quantity_dispensed']} units of {i['medication_id']} from lot {i['lot_number']} "
            f"(expires {i['expiration_date']}) at {fact_text(i['price'])}"
            for i in items
        )
        paying = " and ".join(f"{fact_text(p['amount'])} with payment method {p['payment_id']}" for p in payments)
        return (
            f"Please fill my prescription {self.key}, pharmacist {pharmacist}: {lines}. Insurance billed "
            f"{fact_text(insurance['billed_amount'])}, insurance paid {fact_text(insurance['insurance_paid'])}, "
            f"copay {fact_text(insurance['patient_copay'])}. I'll pay {paying or 'nothing'}."
        )

    def fill_tasks(self) -> list[Draft]:
        items, method = self.fill_items(), self.methods[0] if self.methods else None
        if not items or method is None:
            return []
        dispenses = self.record.get("dispenses") or []
        pharmacist = dispenses[-1]["pharmacist_id"] if dispenses else f"RPH-{self.rng.randint(1000, 9999)}"
        total = money(sum(i["price"] for i in items))
        short = self.rng.random() < 0.5  # insurance billed below the prices: the patient pays the rest too
        billed = money(total * 0.8) if short else total
        paid = money(billed * self.rng.choice([0.5, 0.6, 0.75, 0.8]))
        insurance = {"billed_amount": billed, "insurance_paid": paid, "patient_copay": money(billed - paid)}
        due = money(insurance["patient_copay"] + total - billed)
        payments = [{"payment_id": method, "amount": due}] if due > 0 else []
        reads = [self.read, self.profile, *[action("get_medication", medication_id=i["medication_id"]) for i in items]]

        def fill(pays: list[dict[str, Any]]) -> dict[str, Any]:
            return self.call(
                "fill_prescription", pharmacist_id=pharmacist, items=items, insurance=insurance, payments=pays
            )

        refill_blocked = bool(dispenses) and any(
            int(o.get("refills_remaining") or 0) <= 0 for o in self.record.get("medication_orders") or []
        )
        allowed = self.record.get("status") in FILLABLE and not refill_blocked
        request = self.fill_request(items, insurance, pharmacist, payments)
        drafts = [self.decide(allowed, request, reads, fill(payments), "prescription_id")]
        if allowed and self.rng.random() < FILL_REFUSAL_SHARE:
            other = self.other_method()
            if short and due > insurance["patient_copay"]:  # pays only the copay, not the uncovered amount
                wrong = [{"payment_id": method, "amount": insurance["patient_copay"]}]
            elif other and due > 0:
                wrong = [{"payment_id": other, "amount": due}]
            else:
                return drafts
            request = self.fill_request(items, insurance, pharmacist, wrong)
            drafts.append(self.refuse(request, reads, fill(wrong), "prescription_id"))
        return drafts

    # --- other writes
    def status_tasks(self) -> list[Draft]:
        status = self.record.get("status")
        target = "active" if status in ("on-hold", "expired") else "on-hold"

        def ask(value: str) -> str:
            return f"Please set the status of my prescription {self.key} to '{value}'."

        call = self.call("update_prescription_status", status=target)
        drafts = [self.decide(not self.closed(), ask(target), [self.read], call, "prescription_id")]
        if status == "active" and not self.record.get("dispenses") and self.rng.random() < 0.5:
            call = self.call("update_prescription_status", status="filled")
            drafts.append(self.refuse(ask("filled"), [self.read], call, "prescription_id"))
        return drafts

    def transfer_tasks(self, pharmacies: list[dict[str, Any]]) -> list[Draft]:
        here = (self.record.get("pharmacy") or {}).get("pharmacy_id")
        choices = [p for p in pharmacies if p["pharmacy_id"] != here]
        if not choices or self.rng.random() >= TRANSFER_SHARE:
            return []
        pharmacy = self.rng.choice(choices)
        place = pharmacy["address"]
        request = (
            f"Please transfer my prescription {self.key} to {pharmacy['name']} (pharmacy id "
            f"{pharmacy['pharmacy_id']}), {place['street']}, {place['city']}, {place['state']} {place['zip']}."
        )
        call = self.call("transfer_prescription", pharmacy=pharmacy)
        return [self.decide(not self.closed(), request, [self.read], call, "prescription_id")]

    def counseling_tasks(self) -> list[Draft]:
        value = "no" if self.record.get("counseling_offered") == "yes" else "yes"
        request = (
            f"Please record that counseling was {'' if value == 'yes' else 'not '}offered for my "
            f"prescription {self.key}."
        )
        return [self.write(request, [self.read, self.call("set_counseling_offered", counseling_offered=value)])]

    def payment_tasks(self) -> list[Draft]:
        if not self.methods:
            return []
        amount, method = self.rng.choice(PAYMENT_AMOUNTS), self.rng.choice(self.methods)

        def ask(pm: str) -> str:
            return (
                f"Please add a payment of {fact_text(amount)} to my prescription {self.key} with payment method {pm}."
            )

        reads = [self.read, self.profile]
        call = self.call("add_prescription_payment", payment_id=method, amount=amount)
        drafts = [self.decide(not self.closed(), ask(method), reads, call, "prescription_id")]
        other = self.other_method()
        if other and not self.closed() and self.rng.random() < 0.5:
            call = self.call("add_prescription_payment", payment_id=other, amount=amount)
            drafts.append(self.refuse(ask(other), reads, call, "prescription_id"))
        return drafts

    def cancel_tasks(self) -> list[Draft]:
        request = f"Please cancel my prescription {self.key} and refund what I paid."
        return [
            self.decide(not self.closed(), request, [self.read], self.call("cancel_prescription"), "prescription_id")
        ]

    def foreign_tasks(self) -> list[Draft]:
        """The user asks to cancel a prescription that is another patient's: the read shows its owner."""
        others = [k for k, p in self.base[PRESCRIPTIONS].items() if p["patient_id"] != self.patient_id]
        if not others or self.rng.random() >= FOREIGN_SHARE:
            return []
        other = self.rng.choice(others)
        call = action("cancel_prescription", patient_id=self.patient_id, prescription_id=other)
        read = action("get_prescription", prescription_id=other)
        return [self.refuse(f"Please cancel prescription {other}.", [read], call, "prescription_id")]


def drafts(generator: Generator) -> list[Draft]:
    """Per prescription: a fill (refused when closed, on hold or out of refills; for some a wrong payment,
    refused), a status change (refused when closed; some ask to mark an undispensed one filled), for half a
    transfer, a counseling change, a payment (some from another patient's method, refused), a cancellation
    and, for a quarter, a cancellation of another patient's prescription (refused)."""
    base = generator.domain.base
    # the pharmacies of the data, copied: task arguments must not share objects with the base
    pharmacies = list(
        {
            r["pharmacy"]["pharmacy_id"]: {**r["pharmacy"], "address": dict(r["pharmacy"]["address"])}
            for r in base[PRESCRIPTIONS].values()
        }.values()
    )
    # a refusal forbids every write on its prescription, the derived status writes included
    writes = sorted(
        {spec.name for spec in generator.specs.values() if spec.writes and spec.collection == PRESCRIPTIONS}
        | {spec.name for spec in specs(generator.domain)}
    )
    found: list[Draft] = []
    for key, record in base[PRESCRIPTIONS].items():
        if record.get("patient_id") not in base[PATIENTS]:
            continue
        drafter = MedicineDrafter(generator, key, record, writes)
        found += drafter.fill_tasks()
        found += drafter.status_tasks()
        found += drafter.transfer_tasks(pharmacies)
        found += drafter.counseling_tasks()
        found += drafter.payment_tasks()
        found += drafter.cancel_tasks()
        found += drafter.foreign_tasks()
    return found
