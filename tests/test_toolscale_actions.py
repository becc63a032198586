"""ToolScale policy actions (envs/toolscale/actions/): the earlier task families are byte-identical, the
bank, restaurant, basketball, movie, travel and weather actions enforce their policy rules with clear
errors, created records live in the episode's overlay, and every domain's action families are generated,
verified and split like the others (ecommerce, medicine, railway and school actions and restaurant's
ticket modifications: their own test files)."""

from __future__ import annotations

import hashlib
import json

import pytest
from _toolscale_checks import checked_action_tasks, tools_of

from toolorchestra.envs.toolscale.data import DOMAINS, load_domain
from toolorchestra.envs.toolscale.tasks import (
    BASE_FAMILIES,
    generate_tasks,
)

# sha256 of json.dumps([[id, split, prompt, gold_actions, expected_hash, required_facts, forbidden_actions], ...],
# sort_keys=True) over each domain's tasks of the five earlier families (seed 0, both splits, in order),
# computed with exactly the expression in the test below on commit 6eb8e39 (main, before the actions existed).
# Evaluations already run stay valid only while these hold.
BASE_DIGESTS = {
    "bank": (6146, "6ef2df50205919319f567fe61a50aa99278ec1019f86bb0956127e09099474ab"),
    "basketball": (3392, "4fa72b1fc0cc434083b474be088b2c4847dc34aa5c4d812001be2d51846e6aab"),
    "ecommerce": (1476, "393b7ba8aafa188f7675ef151bddd83a7cb66f2bd72197993de1a64bd3c04626"),
    "medicine": (1088, "e932423d41612f00f47c60a58125db12ca9285d9976e186fa7679c67ca8bd274"),
    "movie": (918, "b1a9c0e277c14f1cc35ab653572ae0b0c8e17d9d5257e8c79ce74a60b4268205"),
    "railway": (1872, "e18b8e79cdd4a3b54bfc5a2ef754fe6b81285cecb35bb9522e993928ca64f6da"),
    "restaurant": (1980, "1e6289c8e593ab993af02c3b8f63b27897fbeb3cc3756b4402c2b1f016da9df7"),
    "school": (2064, "f5b17f220a209e2af4a3a5bfd8d9ad5418157099f8b0d9db79e55336a8be3f73"),
    "travel": (1419, "67de20ae5b9792e76fdd4156dbacc0cca00e54829f9fa4a3181d7315e3ca4b8e"),
    "weather": (528, "efdd29bd5262f2fb604bfca86c87ef644ad6a74545aca04fe38f451fb067ecb1"),
}


@pytest.mark.parametrize("domain", DOMAINS)
def test_earlier_families_are_byte_identical(shared_data, domain):
    tasks = [t for t in generate_tasks(load_domain(shared_data, domain), 0) if t.meta["family"] in BASE_FAMILIES]
    rows = [[t.id, t.split, t.prompt, t.meta["gold_actions"], t.meta["expected_hash"], t.meta["required_facts"],
             t.meta["forbidden_actions"]] for t in tasks]
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()
    assert (len(tasks), digest) == BASE_DIGESTS[domain]




def test_transfer_to_beneficiary_enforces_the_bank_policy(shared_data):
    database, tools = tools_of(shared_data, "bank")
    transfer = tools["initiate_transfer_to_beneficiary"]
    ok = {"client_id": "03DZE1C1", "from_account_id": "1U8RIZ41", "beneficiary_id": "IL32HDL1", "amount": 1000.0}
    beneficiaries = database.domain.base["beneficiaries"]
    suspended = next(b for b in beneficiaries.values() if b["status"] == "suspended")
    pending = next(b for b in beneficiaries.values() if b["status"] == "active"
                   and b["verification"]["status"] == "pending")
    expect = [
        ({**ok, "amount": 0}, "invalid argument amount"),
        ({**ok, "amount": 600000.0}, "exceeds the per-transfer limit 500000.0"),
        ({**ok, "client_id": "nope"}, "does not belong to client 'nope'"),
        ({**ok, "from_account_id": "XXXX"}, "from_account_id 'XXXX' is not an account of client"),
        ({**ok, "beneficiary_id": suspended["beneficiary_id"], "client_id": suspended["client_id"]}, "must be active"),
        ({**ok, "beneficiary_id": pending["beneficiary_id"], "client_id": pending["client_id"]}, "is not verified"),
    ]
    for arguments, message in expect:
        result = transfer.call(arguments)
        assert result.error and message in result.error, (arguments, result.error)
    assert database.changed == {}
    done = json.loads(transfer.call(ok).output)
    account = json.loads(tools["get_account"].call({"account_id": "1U8RIZ41"}).output)
    assert account["balance"]["available"] == 739000.0 and account["balance"]["current"] == 749000.0
    posted = json.loads(tools["get_transaction"].call({"transaction_id": done["transaction_id"]}).output)
    assert posted["amount"] == 1000.0 and posted["direction"] == "debit" and posted["balance_after"] == 749000.0
    assert done["transaction_id"] in json.loads(tools["find_transactions_by_client_id"].call(
        {"value": "03DZE1C1"}).output)["transaction_ids"]
    assert not transfer.call({**ok, "amount": 499000.0}).error  # within the limit: 240000 left available
    big = transfer.call({**ok, "amount": 499000.0})  # within the limit, above what is left available
    assert big.error and "insufficient available balance in account '1U8RIZ41': available 240000.0" in big.error


def test_created_records_hash_and_vanish_like_any_change(shared_data):
    database, tools = tools_of(shared_data, "bank")
    pristine = database.digest()
    record = {"transaction_id": "NEW1", "client_id": "03DZE1C1"}
    database.create("transactions", "NEW1", record)
    assert database.get("transactions", "NEW1") == record and "NEW1" in database.keys("transactions")
    with pytest.raises(KeyError):
        database.create("transactions", "NEW1", record)
    assert database.digest() != pristine
    database.delete("transactions", "NEW1")
    assert database.digest() == pristine  # created then deleted: nothing changed
    first = database.keys("transactions")[0]
    database.delete("transactions", first)
    assert first not in database.keys("transactions") and tools["get_transaction"].call(
        {"transaction_id": first}).error
    assert first in database.domain.base["transactions"]  # the base is never touched


def test_add_beneficiary_creates_a_pending_owned_record(shared_data):
    _, tools = tools_of(shared_data, "bank")
    arguments = {"client_id": "03DZE1C1", "beneficiary_id": "NEWBEN01", "type": "individual",
                 "display_name": "Eva Kiss", "first_name": "Eva", "last_name": "Kiss", "bank_name": "OTP",
                 "account_number_masked": "****9999", "allowed_from_account_ids": ["1U8RIZ41"],
                 "address": {"address1": "Fo utca 1", "city": "Budapest", "state": "Pest", "zip": "1011",
                             "country": "Hungary"}, "per_transfer_limit": 1000.0, "daily_limit": 2000.0}
    business = tools["add_beneficiary"].call({**arguments, "type": "business"})
    assert "business_name" in business.error
    foreign = tools["add_beneficiary"].call({**arguments, "allowed_from_account_ids": ["XXXX"]})
    assert "'XXXX' is not an account of client" in foreign.error
    assert json.loads(tools["add_beneficiary"].call(arguments).output)["verification_status"] == "pending"
    assert "NEWBEN01" in json.loads(tools["get_client"].call({"client_id": "03DZE1C1"}).output)["beneficiary_ids"]
    assert "already exists" in tools["add_beneficiary"].call(arguments).error
    transfer = {"client_id": "03DZE1C1", "from_account_id": "1U8RIZ41", "beneficiary_id": "NEWBEN01", "amount": 10.0}
    assert "not verified" in tools["initiate_transfer_to_beneficiary"].call(transfer).error
    tools["verify_beneficiary"].call({"client_id": "03DZE1C1", "beneficiary_id": "NEWBEN01"})
    assert not tools["initiate_transfer_to_beneficiary"].call(transfer).error


def test_restaurant_cancel_needs_a_placed_ticket_and_refunds_payments(shared_data):
    database, tools = tools_of(shared_data, "restaurant")
    tickets = database.domain.base["service_tickets"]
    busy = next(ref for ref, t in tickets.items() if t["state"] == "in_progress")
    assert "only placed tickets can be cancelled" in tools["cancel_ticket"].call(
        {"ticket_ref": busy, "reason": "late"}).error
    ref, placed = next((ref, t) for ref, t in tickets.items() if t["state"] == "placed")
    done = json.loads(tools["cancel_ticket"].call({"ticket_ref": ref, "reason": "ordered by mistake"}).output)
    paid = [c for c in placed["charges"] if c["kind"] == "payment"]
    assert done["state"] == "cancelled" and len(done["refunds"]) == len(paid)
    instrument = paid[0]["instrument_ref"] if paid else "x"
    tip = tools["add_tip"].call({"ticket_ref": ref, "amount": 10, "instrument_ref": instrument})
    assert "is cancelled" in tip.error


def test_basketball_game_status_follows_the_transitions_and_scoring_needs_a_live_game(shared_data):
    database, tools = tools_of(shared_data, "basketball")
    games = database.domain.base["games"]
    final = next(key for key, g in games.items() if g["status"] == "final")
    scheduled = next(key for key, g in games.items() if g["status"] == "scheduled")
    update = tools["update_game_status"]
    assert "final is terminal" in update.call({"game_id": final, "new_status": "scheduled"}).error
    assert "invalid transition scheduled -> final" in update.call({"game_id": scheduled, "new_status": "final"}).error
    live, record = next((key, g) for key, g in games.items() if g["status"] == "in_progress")
    home, scorer = record["clubs"]["home"], record["box_score"][0]["player_id"]
    event = {"game_id": live, "event_type": "3PT", "points": 3, "club_id": home["club_id"], "player_id": scorer,
             "timestamp": "Q4 01:02"}
    score = tools["record_scoring_event"]
    assert "do not match event_type 3PT" in score.call({**event, "points": 2}).error
    assert "neither the home nor the away club" in score.call({**event, "club_id": "NOPE"}).error
    assert "must exist" in score.call({**event, "player_id": "NOPE"}).error
    assert "only for in_progress games" in score.call({**event, "game_id": final}).error
    assert database.changed == {}
    assert json.loads(score.call(event).output)["score"] == home["score"] + 3
    after = json.loads(tools["get_game"].call({"game_id": live}).output)
    assert after["scoring_history"][-1]["timestamp"] == "Q4 01:02" and after["clubs"]["home"]["score"] == home["score"] + 3
    assert not update.call({"game_id": live, "new_status": "final"}).error
    assert "only for in_progress games" in score.call(event).error  # final now: no more scoring


def test_movie_seat_updates_pay_the_exact_difference_and_cancel_refunds_in_full(shared_data):
    database, tools = tools_of(shared_data, "movie")
    bookings = database.domain.base["bookings"]
    pending = next(key for key, b in bookings.items() if b["status"] == "pending")
    update, cancel = tools["update_booking_seats"], tools["cancel_booking"]
    seats = [{"seat_id": s["seat_id"], "ticket_type": s["ticket_type"]} for s in bookings["9YZMXMW"]["seats"]]
    assert "only confirmed bookings" in update.call({"booking_id": pending, "seats": seats}).error
    show = {"theater_id": "V811UMP", "show_id": "S-CAL-001"}
    free = json.loads(tools["get_seat_availability"].call({"show_id": "S-CAL-001"}).output)["available"]
    taken = [{"seat_id": free[0], "ticket_type": "adult"}]
    total = json.loads(tools["price_preview"].call({**show, "seats": taken}).output)["grand_total"]
    book = {**show, "seats": taken, "delivery_method": "kiosk",
            "customer": {"first_name": "A", "last_name": "B", "email": "a@b.c", "phone": "1"},
            "payments": [{"source": "cash", "payment_method_id": "cash", "amount": total + 1}]}
    assert "must equal the grand total" in tools["create_booking"].call(book).error
    book["payments"][0]["amount"] = total
    created = json.loads(tools["create_booking"].call(book).output)["booking_id"]
    assert "already booked" in tools["create_booking"].call(book).error
    assert "not available" in update.call({"booking_id": "9YZMXMW", "seats": taken}).error
    assert not cancel.call({"booking_id": created}).error  # the seat is free again
    database.changed.clear()
    assert "does not exist" in update.call({"booking_id": "9YZMXMW",
                                             "seats": [{"seat_id": "ZZ9", "ticket_type": "adult"}]}).error
    dearer = [{**seats[0], "ticket_type": "adult"}, {**seats[1], "ticket_type": "adult"}]
    assert "one additional payment of exactly" in update.call({"booking_id": "9YZMXMW", "seats": dearer}).error
    payment = {"source": "wallet", "payment_method_id": "PM0003", "amount": 0.01}
    assert "exactly" in update.call({"booking_id": "9YZMXMW", "seats": dearer, "payment": payment}).error
    assert database.changed == {}
    fewer = json.loads(update.call({"booking_id": "9YZMXMW", "seats": seats[:1]}).output)
    assert fewer["difference"] < 0 and fewer["payment_history"][-1]["amount"] == fewer["difference"]
    paid = fewer["totals"]["amount_paid"]
    done = json.loads(cancel.call({"booking_id": "9YZMXMW"}).output)
    assert done["status"] == "canceled" and done["refund"]["amount"] == -paid and done["totals"]["amount_paid"] == 0
    assert "only confirmed or pending" in cancel.call({"booking_id": "9YZMXMW"}).error


def test_travel_date_change_needs_an_available_departure_and_a_saved_method(shared_data):
    database, tools = tools_of(shared_data, "travel")
    move = tools["update_booking_departure_date"]
    ok = {"traveler_id": "77FK6FU", "booking_id": "BKG-SE-001", "new_departure_date": "26-01-10",
          "payment_method_id": "98PCBC3"}
    expect = [({**ok, "new_departure_date": "26-02-15"}, "is sold_out; only an available departure"),
              ({**ok, "payment_method_id": "NOPE"}, "is not saved in the profile"),
              ({**ok, "traveler_id": "IEZSWTL"}, "is not a booking of traveler 'IEZSWTL'"),
              ({key: value for key, value in ok.items() if key != "payment_method_id"}, "a saved payment_method_id")]
    for arguments, message in expect:
        result = move.call(arguments)
        assert result.error and message in result.error, (arguments, result.error)
    assert database.changed == {}
    done = json.loads(move.call(ok).output)
    assert done["difference"] == (17900.0 - 18500.0) * 2  # a refund of the base-price difference
    assert done["booking"]["payment_history"][-1] == {"payment_id": "98PCBC3", "amount": -1200.0}
    departures = json.loads(tools["get_package"].call({"package_id": "EUYRQSW"}).output)["departures"]
    assert departures["26-01-10"]["available_slots"] == 8 and departures["25-12-05"]["available_slots"] == 10
    travelers = done["booking"]["travelers"]
    grown = tools["update_booking_travelers"].call({**{k: ok[k] for k in ("traveler_id", "booking_id")},
                                                    "travelers": [*travelers, travelers[0]]})
    assert "number of travelers must remain unchanged" in grown.error
    meet = {"agent_id": "6VJG21V", "date": "25-08-08", "time_range": "08:30-09:30", "traveler_id": "77FK6FU"}
    assert "not inside an available slot" in tools["schedule_agent_meeting"].call(
        {**meet, "time_range": "11:00-12:00"}).error
    assert not tools["schedule_agent_meeting"].call(meet).error
    assert "already has a meeting" in tools["schedule_agent_meeting"].call({**meet, "time_range": "09:00-10:00"}).error


def test_weather_verification_takes_only_the_policy_statuses_and_overwrites_the_date(shared_data):
    database, tools = tools_of(shared_data, "weather")
    verify = tools["verify_forecast_for_date"]
    ok = {"forecast_id": "65", "date": "2025-09-03", "actual_high_c": 25.5, "actual_low_c": 17.0,
          "actual_precip_mm": 0.4, "status": "verified"}
    expect = [({**ok, "status": "final"}, "must be one of pending, verified, revised"),
              ({**ok, "date": "2025-09-31"}, "not a real YYYY-MM-DD date"),
              ({**ok, "actual_precip_mm": -1}, "cannot be negative"),
              ({**ok, "forecast_id": "nope"}, "no forecast with forecast_id 'nope'")]
    for arguments, message in expect:
        result = verify.call(arguments)
        assert result.error and message in result.error, (arguments, result.error)
    assert database.changed == {}
    assert not verify.call({**ok, "notes": "Sunny."}).error
    stored = json.loads(tools["get_forecast"].call({"forecast_id": "65"}).output)["verification_by_date"]
    assert stored["2025-09-03"] == {"status": "verified", "actual_high_c": 25.5, "actual_low_c": 17.0,
                                    "actual_precip_mm": 0.4, "notes": "Sunny."}
    assert stored["2025-09-01"]["status"] == "verified"  # other dates untouched


@pytest.mark.parametrize("domain", DOMAINS)
def test_action_families_are_verified_and_split_by_user(shared_data, domain):
    checked_action_tasks(shared_data, domain)
