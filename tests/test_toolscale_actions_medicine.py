"""ToolScale medicine policy actions (envs/toolscale/actions/medicine.py): fills, status updates,
transfers, counseling, payments and cancellations enforce the pharmacy policy with clear errors and write
only the episode's overlay; the action families are generated, verified and split by patient."""

from __future__ import annotations

import json
import math

from _toolscale_checks import checked_action_tasks, expect_errors, tools_of

from toolorchestra.envs.toolscale.tasks import (
    execute,
)

PATIENT, PRESCRIPTION = "ZTSS2LV", "WBQEX7O"  # filled once, refills 3 allowed / 2 remaining, paid 180 by PAY-0001
OWNED = {"patient_id": PATIENT, "prescription_id": PRESCRIPTION}
FILL = {**OWNED, "pharmacist_id": "RPH-1001",
        "items": [{"medication_id": "V3SUMYV", "quantity_dispensed": 30, "lot_number": "JX24A79",
                   "expiration_date": "26-03-14", "price": 580.0}],
        "insurance": {"billed_amount": 500.0, "insurance_paid": 400.0, "patient_copay": 100.0},
        "payments": [{"payment_id": "PM-ZT1", "amount": 180.0}]}  # copay 100 + uncovered 580 - 500




def get(tools, name: str, **arguments):
    return json.loads(tools[name].call(arguments).output)




def foreign_method(database) -> str:
    saved = set(database.domain.base["patients"][PATIENT]["payment_methods"])
    return next(m for p in database.domain.base["patients"].values() for m in p["payment_methods"] if m not in saved)


def with_item(**changes):
    return {**FILL, "items": [{**FILL["items"][0], **changes}]}


def test_fill_checks_orders_lots_payments_and_refills_then_records_the_fill(shared_data):
    database, tools = tools_of(shared_data, "medicine")
    fill = tools["fill_prescription"]
    base = database.domain.base
    other_medication = next(m for m in base["medications"] if m != "V3SUMYV")
    other_lot = next(iter(base["medications"][other_medication]["batches"].values()))["lot_number"]
    on_hold = next(p for p in base["prescriptions"].values() if p["status"] == "on-hold")
    expect_errors(fill, [
        ({**FILL, "patient_id": on_hold["patient_id"]}, f"'{PRESCRIPTION}' is not a prescription of patient"),
        ({**FILL, "patient_id": "NOPE"}, "no patient with patient_id 'NOPE'"),
        (with_item(medication_id=other_medication), "is not in the medication orders of prescription"),
        (with_item(lot_number=other_lot), f"lot_number '{other_lot}' is not a lot of medication 'V3SUMYV'"),
        (with_item(expiration_date="27-01-01"), "does not match lot 'JX24A79' (expires 26-03-14)"),
        (with_item(quantity_dispensed=31), "quantity_dispensed 31 exceeds the ordered quantity 30"),
        (with_item(price=math.nan), "invalid argument price"),
        ({**FILL, "items": FILL["items"] * 2}, "medication_id 'V3SUMYV' is listed twice"),
        ({**FILL, "insurance": {**FILL["insurance"], "insurance_paid": 501.0}}, "insurance_paid 501.0 exceeds"),
        ({**FILL, "payments": [{"payment_id": "PM-ZT1", "amount": 100.0}]},
         "payments sum to 100.0; they must equal the expected patient amount 180.0"),
        ({**FILL, "payments": [{"payment_id": foreign_method(database), "amount": 180.0}]},
         f"is not a payment method saved in the profile of patient '{PATIENT}'"),
        ({**FILL, "patient_id": on_hold["patient_id"], "prescription_id": on_hold["prescription_id"]},
         "is on-hold; only active or filled prescriptions can be filled"),
    ])
    assert database.changed == {}
    done = json.loads(fill.call(FILL).output)
    assert done == {"prescription_id": PRESCRIPTION, "fill_id": f"FILL-{PRESCRIPTION}-2", "status": "filled",
                    "patient_amount": 180.0, "payments": [{"payment_id": "PM-ZT1", "amount": 180.0}]}
    record = get(tools, "get_prescription", prescription_id=PRESCRIPTION)
    assert record["medication_orders"][0]["refills_remaining"] == 1
    assert record["dispenses"][-1]["fill_id"] == f"FILL-{PRESCRIPTION}-2"
    assert record["dispenses"][-1]["insurance"]["reversals"] == []
    assert record["payment_history"] == [{"payment_id": "PAY-0001", "amount": 180.0},
                                         {"payment_id": "PM-ZT1", "amount": 180.0}]
    batch = get(tools, "get_medication", medication_id="V3SUMYV")["batches"]["RBX24A"]
    assert batch["quantity_units"] == 970
    assert base["medications"]["V3SUMYV"]["batches"]["RBX24A"]["quantity_units"] == 1000  # base untouched
    assert not fill.call(FILL).error  # the last refill
    assert "no refills remaining for medication 'V3SUMYV'" in fill.call(FILL).error


def test_fill_needs_inventory_and_an_unexpired_lot(shared_data):
    database, tools = tools_of(shared_data, "medicine")
    database.update("medications", "V3SUMYV", ["batches", "RBX24A", "quantity_units"], 20)
    assert "insufficient inventory in lot 'JX24A79': 20 units, 30 requested" in tools["fill_prescription"].call(
        FILL).error
    database.update("medications", "V3SUMYV", ["batches", "RBX24A", "quantity_units"], 1000)
    database.update("medications", "V3SUMYV", ["batches", "RBX24A", "expiration_date"], "24-01-31")
    result = tools["fill_prescription"].call(with_item(expiration_date="24-01-31"))
    assert "lot 'JX24A79' expired on 24-01-31" in result.error


def test_status_updates_take_only_the_policy_values_and_closed_prescriptions_stay_closed(shared_data):
    database, tools = tools_of(shared_data, "medicine")
    update = tools["update_prescription_status"]
    prescriptions = database.domain.base["prescriptions"]
    fresh = next(p for p in prescriptions.values() if p["status"] == "active" and not p["dispenses"])
    expired = next(p for p in prescriptions.values() if p["status"] == "expired")
    expect_errors(update, [
        ({**OWNED, "status": "canceled"}, "is set by cancel_prescription"),
        ({**OWNED, "status": "transferred"}, "is set by transfer_prescription"),
        ({**OWNED, "status": "paused"}, "expected one of active, on-hold, filled"),
        ({**OWNED, "status": "filled"}, f"prescription '{PRESCRIPTION}' is already filled"),
        ({"patient_id": fresh["patient_id"], "prescription_id": fresh["prescription_id"], "status": "filled"},
         "has no recorded fill; use fill_prescription"),
        ({"patient_id": expired["patient_id"], "prescription_id": expired["prescription_id"], "status": "active"},
         "is expired; a canceled, transferred, expired prescription allows no status change"),
    ])
    assert database.changed == {}
    assert get(tools, "update_prescription_status", **OWNED, status="on-hold") == {
        "prescription_id": PRESCRIPTION, "old_status": "filled", "status": "on-hold"}
    assert get(tools, "get_prescription", prescription_id=PRESCRIPTION)["status"] == "on-hold"


def test_transfer_moves_to_another_pharmacy_and_closes_the_prescription(shared_data):
    database, tools = tools_of(shared_data, "medicine")
    here = database.domain.base["prescriptions"][PRESCRIPTION]["pharmacy"]
    elsewhere = {"pharmacy_id": "PHARM-NEW", "name": "Lakeside Pharmacy",
                 "address": {"street": "9 Lake Rd", "city": "Springfield", "state": "IL", "zip": "62701"}}
    transfer = tools["transfer_prescription"]
    assert "is already at pharmacy 'PHARM-001'" in transfer.call({**OWNED, "pharmacy": {**elsewhere, "pharmacy_id":
                                                                                         here["pharmacy_id"]}}).error
    assert "address" in transfer.call({**OWNED, "pharmacy": {**elsewhere, "address": {"street": "x"}}}).error
    assert database.changed == {}
    assert get(tools, "transfer_prescription", **OWNED, pharmacy=elsewhere)["status"] == "transferred"
    record = get(tools, "get_prescription", prescription_id=PRESCRIPTION)
    assert record["pharmacy"] == elsewhere and record["status"] == "transferred"
    assert "is transferred; a canceled, transferred, expired prescription allows no transfer" in transfer.call(
        {**OWNED, "pharmacy": {**elsewhere, "pharmacy_id": "PHARM-OTHER"}}).error
    assert "allows no payment" in tools["add_prescription_payment"].call(
        {**OWNED, "payment_id": "PM-ZT1", "amount": 10.0}).error
    assert "is transferred; only active or filled" in tools["fill_prescription"].call(FILL).error


def test_counseling_takes_yes_or_no_and_must_change(shared_data):
    database, tools = tools_of(shared_data, "medicine")
    counsel = tools["set_counseling_offered"]
    expect_errors(counsel, [({**OWNED, "counseling_offered": "maybe"}, "expected yes or no"),
                            ({**OWNED, "counseling_offered": "yes"}, "is already 'yes'")])
    assert database.changed == {}
    assert get(tools, "set_counseling_offered", **OWNED, counseling_offered="no")["counseling_offered"] == "no"
    assert get(tools, "get_prescription", prescription_id=PRESCRIPTION)["counseling_offered"] == "no"


def test_payments_need_a_saved_method_and_cancel_refunds_each_payment_id(shared_data):
    database, tools = tools_of(shared_data, "medicine")
    pay, cancel = tools["add_prescription_payment"], tools["cancel_prescription"]
    unsaved = f"is not a payment method saved in the profile of patient '{PATIENT}'"
    expect_errors(pay, [({**OWNED, "payment_id": foreign_method(database), "amount": 20.0}, unsaved),
                        ({**OWNED, "payment_id": "PM-ZT1", "amount": math.inf}, "invalid argument amount"),
                        ({**OWNED, "payment_id": "PM-ZT1", "amount": 0}, "amount")])
    other = next(p for p in database.domain.base["prescriptions"].values() if p["patient_id"] != PATIENT)
    assert f"'{other['prescription_id']}' is not a prescription of patient '{PATIENT}'" in cancel.call(
        {"patient_id": PATIENT, "prescription_id": other["prescription_id"]}).error
    assert database.changed == {}
    assert get(tools, "add_prescription_payment", **OWNED, payment_id="PM-ZT1", amount=20.0)["payment"] == {
        "payment_id": "PM-ZT1", "amount": 20.0}
    done = json.loads(cancel.call(OWNED).output)
    assert done["status"] == "canceled"
    assert done["refunds"] == [{"payment_id": "PAY-0001", "amount": -180.0}, {"payment_id": "PM-ZT1", "amount": -20.0}]
    record = get(tools, "get_prescription", prescription_id=PRESCRIPTION)
    assert record["status"] == "canceled" and record["payment_history"][-2:] == done["refunds"]
    assert "is canceled; a canceled, transferred, expired prescription allows no cancellation" in cancel.call(
        OWNED).error


def test_medicine_action_families_are_verified_and_split_by_patient(shared_data):
    domain, actions = checked_action_tasks(shared_data, "medicine")
    names = {call["name"] for t in actions for call in t.meta["gold_actions"] + t.meta.get("refused_actions", [])}
    assert {"fill_prescription", "update_prescription_status", "transfer_prescription", "set_counseling_offered",
            "add_prescription_payment", "cancel_prescription"} <= names
    pristine = domain.new_database().digest()
    for task in actions:
        if task.meta["family"] == "action_refusal":  # the forbidden request is in the task, fails, writes nothing
            refused = task.meta["refused_actions"]
            assert refused and not task.meta["writes"] and task.meta["expected_hash"] == pristine
            assert refused[0]["name"] in {rule["name"] for rule in task.meta["forbidden_actions"]}
        else:
            assert task.meta["expected_hash"] != pristine
    sample = [t for t in actions if t.meta["family"] == "action_refusal"][:20]
    for task in sample:  # replayed: the reads succeed, the refused call fails
        results, digest = execute(domain, task.meta["gold_actions"] + task.meta["refused_actions"])
        assert all(not r.error for r in results[:-1]) and results[-1].error and digest == pristine
    assert all(t.meta["owner"].startswith("patients/") for t in actions)
