"""Railway policy actions (envs/toolscale/actions/railway.py): cancellation only on the policy's grounds (24 hours,
a cancelled train, first_class, insurance with a covered reason) and never once departed, with refunds; bag and
bike changes priced at $15/$10 and paid by one saved method; passenger fixes keep the count; wallet top-ups in
whole dollars. The action tasks are all verified (none dropped), deterministic and split by user."""

from __future__ import annotations

import json

from _toolscale_checks import checked_action_tasks, expect_errors, tools_of

from toolorchestra.envs.toolscale.actions import railway
from toolorchestra.envs.toolscale.data import load_domain
from toolorchestra.envs.toolscale.tasks import (
    Generator,
    verify,
)

# cz201: user cz101, first class, 2 passengers, 2 bags, no bike, paid 1640 (pay-cz-0001); wallet-cz-0001 holds 2000.
# cz202: user cz101, second class, no insurance, trains ec 279 (2025-09-10) and ec 278, all on time.
# chr00002: user chu00002, second class, insured, no cancelled train.
FIRST = {"user_id": "cz101", "reservation_id": "cz201"}
PLAIN = {"user_id": "cz101", "reservation_id": "cz202"}
INSURED = {"user_id": "chu00002", "reservation_id": "chr00002"}




def output(tools, name: str, arguments: dict) -> dict:
    result = tools[name].call(arguments)
    assert not result.error, result.error
    return json.loads(result.output)




def test_cancel_needs_a_policy_ground_and_refunds_every_payment(shared_data):
    database, tools = tools_of(shared_data, "railway")
    cancel = tools["cancel_reservation"]
    expect_errors(cancel, [
        ({**PLAIN, "reason": "change_of_plan"}, "cannot be cancelled: it was not booked within the last 24 hours"),
        ({**PLAIN, "reason": "health"}, "it has no travel insurance"),  # a covered reason needs the insurance
        ({**INSURED, "reason": "change_of_plan"}, "the reason 'change_of_plan' is not one the insurance covers"),
        ({**PLAIN, "reason": "bored"}, "invalid argument reason: 'bored'"),
        ({**PLAIN, "user_id": "cz102", "reason": "other"}, "'cz202' is not a reservation of user 'cz102'"),
        ({**PLAIN, "reservation_id": "nope", "reason": "other"}, "no reservation with reservation_id 'nope'"),
        ({**PLAIN, "user_id": "nope", "reason": "other"}, "no user with user_id 'nope'"),
        ({**PLAIN}, "invalid argument"),
    ])
    assert database.changed == {}
    assert output(tools, "cancel_reservation", {**INSURED, "reason": "weather"})["grounds"] == [
        "travel insurance covers weather"]
    done = output(tools, "cancel_reservation", {**FIRST, "reason": "change_of_plan"})
    assert done["grounds"] == ["first_class reservation"]
    assert done["refunds"] == [{"payment_id": "pay-cz-0001", "amount": -1640.0}]
    stored = output(tools, "get_reservation", {"reservation_id": "cz201"})
    assert stored["status"] == "cancelled" and stored["payment_history"] == [
        {"payment_id": "pay-cz-0001", "amount": 1640.0}, {"payment_id": "pay-cz-0001", "amount": -1640.0}]
    assert output(tools, "get_user", {"user_id": "cz101"})["payment_methods"]["wallet-cz-0001"]["extra_info"] == {
        "amount": 2000}  # refunds take 5 to 7 business days: no balance moves now
    expect_errors(cancel, [({**FIRST, "reason": "other"}, "'cz201' is already cancelled")])
    expect_errors(tools["modify_reservation_bags"], [({**FIRST, "total_bags": 3, "bikes": 0},
                                                      "'cz201' is cancelled; it cannot be modified")])


def test_cancel_grounds_follow_the_policy_clock_and_train_status(shared_data):
    cases = [  # (a change to the episode's database, whether cz202 can then be cancelled for a change of plan)
        (("reservations", "cz202", "created_at", "2024-05-15 09:30:00"), "booked within the last 24 hours"),
        (("reservations", "cz202", "created_at", "2024-05-15t20:00:00+02:00"), "booked within the last 24 hours"),
        (("reservations", "cz202", "created_at", "2024-05-14 14:59:00"), None),  # 24 h 1 min before the clock
        (("reservations", "cz202", "created_at", "2024-05-15 16:00:00"), None),  # after the clock: not "the last"
        (("trains", "ec 279", ["dates", "2025-09-10", "status"], "cancelled"),
         "train ec 279 on 2025-09-10 is cancelled"),
        (("trains", "ec 279", ["dates", "2025-09-10", "status"], "delayed"), None),
    ]
    for (collection, key, path, value), ground in cases:
        database, tools = tools_of(shared_data, "railway")
        database.update(collection, key, path, value)
        result = tools["cancel_reservation"].call({**PLAIN, "reason": "change_of_plan"})
        if ground:
            assert json.loads(result.output)["grounds"] == [ground], (value, result.error)
        else:
            assert result.error and "cannot be cancelled" in result.error, (value, result.output)
    database, tools = tools_of(shared_data, "railway")  # a segment already under way: even first class needs a human agent
    segments = database.get("reservations", "cz201")["trains"]
    database.update("reservations", "cz201", "trains", [{**segments[0], "date": "2024-05-15"}])  # rj 75 left 09:12
    before = database.digest()
    expect_errors(tools["cancel_reservation"], [({**FIRST, "reason": "health"},
                                                 "rj 75 on 2024-05-15 has already departed")])
    assert "human agent" in tools["cancel_reservation"].call({**FIRST, "reason": "health"}).error
    assert database.digest() == before
    database.update("reservations", "cz201", "trains", [{**segments[0], "date": "2024-05-16"}])
    assert not tools["cancel_reservation"].call({**FIRST, "reason": "health"}).error


def test_bags_and_bikes_cost_15_and_10_and_move_a_saved_wallet(shared_data):
    database, tools = tools_of(shared_data, "railway")
    bags = tools["modify_reservation_bags"]
    expect_errors(bags, [
        ({**FIRST, "total_bags": 2, "bikes": 0}, "already has 2 bags and 0 bikes; nothing to change"),
        ({**FIRST, "total_bags": 3, "bikes": 1}, "the fees change by 25: one saved payment_method_id is required"),
        ({**FIRST, "total_bags": 3, "bikes": 1, "payment_method_id": "card-cz-0002"},
         "'card-cz-0002' is not saved in the profile of user 'cz101'"),
        ({**FIRST, "total_bags": -1, "bikes": 0, "payment_method_id": "card-cz-0001"}, "invalid argument total_bags"),
        ({**FIRST, "total_bags": 2, "bikes": 1.5, "payment_method_id": "card-cz-0001"}, "invalid argument bikes"),
    ])
    assert database.changed == {}
    done = output(tools, "modify_reservation_bags", {**FIRST, "total_bags": 3, "bikes": 1,
                                                     "payment_method_id": "wallet-cz-0001"})
    assert done["difference"] == 25 and done["payment"] == {"payment_id": "wallet-cz-0001", "amount": 25.0}
    wallet = lambda: output(tools, "get_user", {"user_id": "cz101"})["payment_methods"]["wallet-cz-0001"]
    assert wallet()["extra_info"]["amount"] == 1975
    refund = output(tools, "modify_reservation_bags", {**FIRST, "total_bags": 1, "bikes": 0,
                                                       "payment_method_id": "wallet-cz-0001"})
    assert refund["difference"] == -25 and wallet()["extra_info"]["amount"] == 2000  # 1 bag per passenger is free
    assert not bags.call({**FIRST, "total_bags": 2, "bikes": 0}).error  # still within the free bags: no payment
    stored = output(tools, "get_reservation", {"reservation_id": "cz201"})
    assert (stored["total_bags"], stored["bikes"]) == (2, 0)
    assert [p["amount"] for p in stored["payment_history"]] == [1640.0, 25.0, -25.0]
    database.update("users", "cz101", ["payment_methods", "wallet-cz-0001", "extra_info", "amount"], 20)
    before = database.digest()
    expect_errors(bags, [({**FIRST, "total_bags": 3, "bikes": 1, "payment_method_id": "wallet-cz-0001"},
                          "wallet 'wallet-cz-0001' holds 20, less than the charge of 25")])
    assert database.digest() == before
    card = output(tools, "modify_reservation_bags", {**FIRST, "total_bags": 3, "bikes": 1,
                                                     "payment_method_id": "card-cz-0001"})
    assert card["payment"] == {"payment_id": "card-cz-0001", "amount": 25.0}


def test_passenger_updates_keep_the_count_and_need_real_dates(shared_data):
    database, tools = tools_of(shared_data, "railway")
    people = [dict(p) for p in database.get("reservations", "cz201")["passengers"]]
    update = tools["update_passengers"]
    expect_errors(update, [
        ({**FIRST, "passengers": people[:1]}, "the number of passengers cannot change: the reservation has 2, got 1"),
        ({**FIRST, "passengers": [*people, people[0]]}, "has 2, got 3"),
        ({**FIRST, "passengers": [{**people[0], "dob": "1990-02-30"}, people[1]]},
         "passengers.0.dob: '1990-02-30' is not a real YYYY-MM-DD date"),
        ({**FIRST, "passengers": [people[0], {**people[1], "dob": "2030-01-01"}]}, "is after today (2024-05-15)"),
        ({**FIRST, "passengers": [{**people[0], "dob": "88-03-14"}, people[1]]}, "invalid argument passengers.0.dob"),
        ({**FIRST, "passengers": [{**people[0], "last_name": "  "}, people[1]]}, "passengers.0.last_name: a name"),
        ({**FIRST, "passengers": people}, "are already these; nothing to change"),
        ({**PLAIN, "reservation_id": "cz201", "user_id": "cz102", "passengers": people}, "not a reservation of user"),
    ])
    assert database.changed == {}
    fixed = [people[0], {**people[1], "last_name": "nováková-berg", "dob": "1990-07-23"}]
    assert output(tools, "update_passengers", {**FIRST, "passengers": fixed})["passengers"] == fixed
    assert output(tools, "get_reservation", {"reservation_id": "cz201"})["passengers"] == fixed


def test_wallet_top_ups_are_whole_dollars_funded_by_a_saved_card(shared_data):
    database, tools = tools_of(shared_data, "railway")
    top_up = tools["add_wallet_funds"]
    expect_errors(top_up, [
        ({"user_id": "cz101", "amount": 25.5}, "top-ups must be positive whole-dollar amounts, got 25.5"),
        ({"user_id": "cz101", "amount": 0}, "whole-dollar"),
        ({"user_id": "cz101", "amount": -5}, "whole-dollar"),
        ({"user_id": "cz101", "amount": float("nan")}, "whole-dollar"),
        ({"user_id": "cz101", "amount": 10, "payment_method_id": "wallet-cz-0001"}, "is a wallet; a top-up is funded"),
        ({"user_id": "cz101", "amount": 10, "payment_method_id": "card-cz-0002"}, "not saved in the profile"),
        ({"user_id": "nope", "amount": 10}, "no user with user_id 'nope'"),
        ({"user_id": "cz101", "amount": "10"}, "invalid argument amount"),
    ])
    assert database.changed == {}
    assert output(tools, "add_wallet_funds", {"user_id": "cz101", "amount": 100})["balance"] == 2100
    done = output(tools, "add_wallet_funds", {"user_id": "cz101", "amount": 50.0, "payment_method_id": "card-cz-0001"})
    assert done == {"user_id": "cz101", "wallet_id": "wallet-cz-0001", "created": False, "amount": 50, "balance": 2150}
    card_only = {"card-cz-0001": database.get("users", "cz101")["payment_methods"]["card-cz-0001"]}
    database.update("users", "cz101", "payment_methods", card_only)  # no wallet: the top-up creates one
    made = output(tools, "add_wallet_funds", {"user_id": "cz101", "amount": 30})
    assert made["created"] and made["wallet_id"] == "wallet_cz101" and made["balance"] == 30
    assert output(tools, "get_user", {"user_id": "cz101"})["payment_methods"]["wallet_cz101"] == {
        "source": "wallet", "id": "wallet_cz101", "extra_info": {"amount": 30}}


def test_railway_action_families_are_verified_and_split_by_user(shared_data):
    domain, actions = checked_action_tasks(shared_data, "railway")
    for task in actions:
        if task.meta["family"] == "action_refusal":  # the forbidden request is in the task and fails
            assert task.meta["refused_actions"] and not task.meta["writes"]
            assert not {call["name"] for call in task.meta["gold_actions"]} & {s.name for s in railway.specs(domain)}
    # every tool is asked for both ways: done and refused
    done = {t.meta["gold_actions"][-1]["name"] for t in actions if t.meta["family"] == "action_write"}
    refused = {t.meta["refused_actions"][0]["name"] for t in actions if t.meta["family"] == "action_refusal"}
    assert done == refused == {spec.name for spec in railway.specs(domain)}


def test_no_railway_draft_is_dropped_and_drafting_is_deterministic(shared_data):
    domain = load_domain(shared_data, "railway")
    drafts = railway.drafts(Generator(domain, 0, stream="actions"))
    assert len(drafts) >= 300
    assert [d for d in drafts if verify(domain, d) is None] == []  # the generator would drop these silently
    again = railway.drafts(Generator(domain, 0, stream="actions"))
    assert [(d.prompt, d.actions, d.refused) for d in again] == [(d.prompt, d.actions, d.refused) for d in drafts]
