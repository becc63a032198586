"""ToolScale e-commerce policy actions (envs/toolscale/actions/ecommerce.py): authentication by name and postal
code, the default-address change, the pending-sale actions (cancel, delivery address, payment method) and the
delivered-sale actions (return, exchange) enforce their policy rules with clear errors and write what they
should, only in the episode's overlay; the action families are generated, verified and split by user."""

from __future__ import annotations

import json

import pytest
from _toolscale_checks import checked_action_tasks, expect_errors, tools_of

ADDRESS = {"line1": "18 Juniper Lane", "line2": "", "municipality": "Austin", "region": "TX", "nation": "USA",
           "postal_code": "78701"}
# in db.json: account 4aoKwmS (card degOF7A) holds the shipped sale wiBDTva, two jeans of catalogue group lJC5h5v
# (wiBDTva 59.99, dwZvqxm 64.99, both in stock); account 6rHXKfi (card UAae1hG) holds the delivered sale xgEXLLy
JEANS = {"account_key": "4aoKwmS", "sale_ref": "wiBDTva"}
FREEZER = {"account_key": "6rHXKfi", "sale_ref": "xgEXLLy"}


@pytest.fixture
def ecommerce(shared_data):
    return tools_of(shared_data, "ecommerce")




def sale(tools, sale_ref: str) -> dict:
    return json.loads(tools["get_sale"].call({"sale_ref": sale_ref}).output)


def test_name_zip_lookup_and_default_address_change(ecommerce):
    database, tools = ecommerce
    find = tools["find_account_key_by_name_zip"]
    assert json.loads(find.call({"first_name": "jordan", "last_name": "LEE", "postal_code": "10001"}).output) == {
        "account_key": "6rHXKfi"}
    shared = json.loads(find.call({"first_name": "Alex", "last_name": "Rivera", "postal_code": "62704"}).output)
    assert len(shared["account_keys"]) > 1 and "several accounts" in shared["note"]  # never one picked silently
    assert "no account with name" in find.call({"first_name": "Jordan", "last_name": "Lee",
                                                "postal_code": "99999"}).error
    change = tools["modify_account_address"]
    expect_errors(change, [({"account_key": "6rHXKfi", **ADDRESS, "municipality": "  "}, "invalid argument municipality"),
                           ({"account_key": "nope", **ADDRESS}, "no account with account_key 'nope'"),
                           ({"account_key": "6rHXKfi", **{k: v for k, v in ADDRESS.items() if k != "nation"}},
                            "invalid argument")])
    assert database.changed == {}
    done = json.loads(change.call({"account_key": "6rHXKfi", **ADDRESS}).output)
    assert done["old_location"]["postal_code"] == "10001" and done["location"] == ADDRESS  # an empty line2 is fine
    assert json.loads(tools["get_account"].call({"account_key": "6rHXKfi"}).output)["location"] == ADDRESS
    assert database.domain.base["accounts"]["6rHXKfi"]["location"]["postal_code"] == "10001"  # base untouched


def test_pending_sale_actions_need_a_pending_sale_of_the_account(ecommerce):
    database, tools = ecommerce
    cancel, deliver, pay = (tools[name] for name in ("cancel_pending_sale", "modify_pending_sale_address",
                                                     "modify_pending_sale_payment"))
    reason = {"reason": "no longer needed"}
    expect_errors(cancel, [({**JEANS, **reason}, "is shipped; only pending sales allow cancellation"),
                           ({**FREEZER, **reason}, "is delivered; only pending sales allow cancellation"),
                           ({**JEANS, "account_key": "6rHXKfi", **reason}, "is not a sale of account '6rHXKfi'"),
                           ({**JEANS, "sale_ref": "nope", **reason}, "no sale with sale_ref 'nope'")])
    expect_errors(deliver, [({**JEANS, **ADDRESS}, "only pending sales allow a delivery address change")])
    expect_errors(pay, [({**JEANS, "instrument_id": "degOF7A"}, "only pending sales allow a payment method change")])
    assert database.changed == {}

    database.update("sales", "wiBDTva", "state", "pending")  # the data hold no pending sale: make one
    expect_errors(cancel, [({**JEANS, "reason": "changed my mind"}, "'no longer needed' or 'ordered by mistake'")])
    expect_errors(deliver, [({**JEANS, **ADDRESS, "line1": ""}, "invalid argument line1")])
    expect_errors(pay, [({**JEANS, "instrument_id": "degOF7A"}, "must be different from the current one"),
                        ({**JEANS, "instrument_id": "UAae1hG"}, "'UAae1hG' is not a funding source of account")])
    moved = json.loads(deliver.call({**JEANS, **ADDRESS}).output)
    assert moved["state"] == "pending" and sale(tools, "wiBDTva")["delivery"] == ADDRESS

    gift = {"origin": "gift_card", "instrument_id": "GC1", "meta": {}}
    database.update("accounts", "4aoKwmS", ["funding_sources", "GC1"], gift)
    paid = json.loads(pay.call({**JEANS, "instrument_id": "GC1"}).output)
    assert paid["refund_timing"] == "5-7 business days"  # the original instrument is a credit card
    assert sale(tools, "wiBDTva")["ledger"] == [
        {"entry_kind": "payment", "value": 124.98, "instrument_id": "degOF7A"},
        {"entry_kind": "payment", "value": 124.98, "instrument_id": "GC1"},
        {"entry_kind": "refund", "value": 124.98, "instrument_id": "degOF7A"}]
    expect_errors(pay, [({**JEANS, "instrument_id": "degOF7A"}, "has 2 payment entries")])  # exactly one needed

    done = json.loads(cancel.call({**JEANS, "reason": " Ordered by Mistake "}).output)
    assert done["state"] == "cancelled" and done["refund_timing"] == {"degOF7A": "5-7 business days",
                                                                      "GC1": "immediate"}
    after = sale(tools, "wiBDTva")
    assert after["cancel_reason"] == "ordered by mistake" and after["ledger"][-2:] == [
        {"entry_kind": "refund", "value": 124.98, "instrument_id": "degOF7A"},
        {"entry_kind": "refund", "value": 124.98, "instrument_id": "GC1"}]  # one refund per payment entry
    expect_errors(cancel, [({**JEANS, **reason}, "is cancelled; only pending sales allow cancellation")])
    assert database.domain.base["sales"]["wiBDTva"]["state"] == "shipped"


def test_return_needs_a_delivered_sale_its_items_and_the_original_instrument(ecommerce):
    database, tools = ecommerce
    back = tools["return_delivered_sale_items"]
    ok = {**FREEZER, "unit_skus": ["U9yFmhd"], "instrument_id": "UAae1hG"}
    expect_errors(back, [({**ok, "unit_skus": ["U9yFmhd", "U9yFmhd"]}, "sale 'xgEXLLy' has only 1"),
                         ({**ok, "unit_skus": ["nope"]}, "has none; the items must exist in the sale"),
                         ({**ok, "unit_skus": []}, "invalid argument unit_skus"),
                         ({**ok, "instrument_id": "degOF7A"}, "original payment instrument or a gift card"),
                         ({**ok, "account_key": "4aoKwmS"}, "is not a sale of account '4aoKwmS'"),
                         ({**JEANS, "unit_skus": ["wiBDTva"], "instrument_id": "degOF7A"},
                          "is shipped; only delivered sales allow a return")])
    assert database.changed == {}
    done = json.loads(back.call(ok).output)
    assert done["return_request"] == {"unit_skus": ["U9yFmhd"], "instrument_id": "UAae1hG", "refund_value": 899.99}
    assert sale(tools, "xgEXLLy")["state"] == "return requested"
    expect_errors(back, [(ok, "is return requested; only delivered sales allow a return")])  # only once
    expect_errors(tools["exchange_delivered_sale_items"], [
        ({**FREEZER, "unit_skus_old": ["U9yFmhd"], "unit_skus_new": ["U9yFmhd"], "instrument_id": "UAae1hG"},
         "only delivered sales allow an exchange")])


def test_return_to_a_gift_card_and_the_listed_order_does_not_matter(ecommerce):
    database, tools = ecommerce
    database.update("sales", "wiBDTva", "state", "delivered")
    gift = {"origin": "gift_card", "instrument_id": "GC1", "meta": {}}
    database.update("accounts", "4aoKwmS", ["funding_sources", "GC1"], gift)
    pristine = dict(database.changed)
    digests = []
    for skus in (["wiBDTva", "dwZvqxm"], ["dwZvqxm", "wiBDTva"]):
        database.changed = dict(pristine)
        done = json.loads(tools["return_delivered_sale_items"].call({**JEANS, "unit_skus": skus,
                                                                     "instrument_id": "GC1"}).output)
        assert done["return_request"]["refund_value"] == 124.98
        digests.append(database.digest())
    assert digests[0] == digests[1]


def test_exchange_stays_in_the_group_in_stock_and_pairs_by_position(ecommerce):
    database, tools = ecommerce
    swap = tools["exchange_delivered_sale_items"]
    ok = {**JEANS, "unit_skus_old": ["wiBDTva"], "unit_skus_new": ["dwZvqxm"], "instrument_id": "degOF7A"}
    expect_errors(swap, [(ok, "is shipped; only delivered sales allow an exchange")])
    database.update("sales", "wiBDTva", "state", "delivered")
    expect_errors(swap, [({**ok, "unit_skus_new": ["dwZvqxm", "wiBDTva"]}, "they must be the same length"),
                         ({**ok, "unit_skus_new": ["U9yFmhd"]}, "is not an offering of catalogue group 'lJC5h5v'"),
                         ({**ok, "unit_skus_old": ["U9yFmhd"]}, "has none; the items must exist in the sale"),
                         ({**ok, "instrument_id": "UAae1hG"}, "is not a funding source of account '4aoKwmS'")])
    database.update("catalogue", "lJC5h5v", ["offerings", "dwZvqxm", "in_stock"], False)
    expect_errors(swap, [(ok, "'dwZvqxm' is out of stock")])
    database.update("catalogue", "lJC5h5v", ["offerings", "dwZvqxm", "in_stock"], True)
    both = {**ok, "unit_skus_old": ["wiBDTva", "dwZvqxm"], "unit_skus_new": ["dwZvqxm", "wiBDTva"]}
    done = json.loads(swap.call(both).output)["exchange_request"]
    assert done["pairs"] == [{"old": "dwZvqxm", "new": "wiBDTva"}, {"old": "wiBDTva", "new": "dwZvqxm"}]
    assert done["price_difference"] == 0.0
    assert sale(tools, "wiBDTva")["state"] == "exchange requested" and sale(tools, "wiBDTva")["ledger"] == \
        database.domain.base["sales"]["wiBDTva"]["ledger"]  # the difference is settled offline
    expect_errors(swap, [(ok, "is exchange requested; only delivered sales allow an exchange")])  # only once


def test_ecommerce_actions_refuse_the_named_sale_and_authenticate_by_name_and_zip(shared_data):
    _, actions = checked_action_tasks(shared_data, "ecommerce")
    for task in actions:
        if task.meta["family"] == "action_refusal":  # the forbidden request is in the task and fails
            assert task.meta["refused_actions"] and not task.meta["writes"]
            assert {rule["value"] for rule in task.meta["forbidden_actions"]} == {
                call["arguments"]["sale_ref"] for call in task.meta["refused_actions"]}
    names = {t.meta["gold_actions"][-1]["name"] for t in actions if t.meta["family"] == "action_write"}
    assert {"modify_account_address", "return_delivered_sale_items"} <= names
    # accounts sharing their email are authenticated by name and postal code
    assert any(t.meta["gold_actions"][0]["name"] == "find_account_key_by_name_zip" for t in actions)
