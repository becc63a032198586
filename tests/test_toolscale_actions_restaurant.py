"""ToolScale restaurant policy actions (envs/toolscale/actions/restaurant.py): the "Modify placed ticket" tools
(dropoff address, table information, payment instrument, plate selections) enforce their policy rules with clear
errors and write what they should, only in the episode's overlay; the action families use them, done and refused,
and verification keeps every draft."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from _toolscale_checks import checked_action_tasks, expect_errors, tools_of

from toolorchestra.envs.toolscale.actions import action_drafts
from toolorchestra.envs.toolscale.tasks import Generator

TICKETS, PATRONS, MENU = "service_tickets", "patron_registry", "menu_board"
# in db.json: cmYq04O placed delivery (patron VD6EWAX, paid with 32WO76E, its only instrument; C8R63h1 is another
# patron's); 42zqDqd in_progress delivery; tu3v0ld placed dine_in; ydeo7fe in_progress dine_in; UgjvUhG placed
# takeout. tZoV7rl placed delivery of patron tZoV7rl (instrument gh5ic0M): one plate mn1mEsg (95.0) of dish
# TtBjGxz, whose other plate is TvCGrmk (110.0); gh5ic0M (same patron) in_progress with a plate of that dish;
# SknHzVX is a plate of another dish (oCBGWNl).
ADDRESS = {"line_one": "Kárász utca 10", "line_two": "", "municipality": "Szeged", "province": "Csongrád-Csanád",
           "nation": "Hungary", "postal_code": "6720"}
TABLE = {"zone": "Garden", "table_no": "A3", "seat_count": 6}
PLATES = {"ticket_ref": "tZoV7rl", "plate_refs": ["mn1mEsg"], "new_plate_refs": ["TvCGrmk"],
          "instrument_ref": "gh5ic0M"}
NEW_TOOLS = ("modify_ticket_dropoff", "modify_ticket_table", "modify_ticket_payment", "modify_ticket_plates")


@pytest.fixture
def restaurant(shared_data):
    return tools_of(shared_data, "restaurant")




def ticket(tools, ref: str) -> dict:
    return json.loads(tools["get_ticket"].call({"ticket_ref": ref}).output)


def test_dropoff_change_needs_a_placed_delivery_ticket_and_a_full_address(restaurant):
    database, tools = restaurant
    change = tools["modify_ticket_dropoff"]
    expect_errors(change, [
        ({"ticket_ref": "42zqDqd", **ADDRESS}, "'42zqDqd' is in_progress; only placed tickets can change"),
        ({"ticket_ref": "tu3v0ld", **ADDRESS}, "'tu3v0ld' is dine_in; only delivery tickets can change their dropoff"),
        ({"ticket_ref": "UgjvUhG", **ADDRESS}, "is takeout; only delivery tickets"),
        ({"ticket_ref": "cmYq04O", **ADDRESS, "municipality": "  "}, "invalid argument municipality"),
        ({"ticket_ref": "cmYq04O", **{k: v for k, v in ADDRESS.items() if k != "province"}}, "invalid argument"),
        ({"ticket_ref": "nope", **ADDRESS}, "no ticket with ticket_ref 'nope'"),
    ])
    assert database.changed == {}
    done = json.loads(change.call({"ticket_ref": "cmYq04O", **ADDRESS}).output)
    assert done["dropoff"] == ADDRESS and done["old_dropoff"] != ADDRESS  # an empty line_two is fine
    assert ticket(tools, "cmYq04O")["dropoff"] == ADDRESS and ticket(tools, "cmYq04O")["state"] == "placed"
    assert database.domain.base[TICKETS]["cmYq04O"]["dropoff"] != ADDRESS  # the base is never touched


def test_table_change_needs_a_placed_dine_in_ticket(restaurant):
    database, tools = restaurant
    change = tools["modify_ticket_table"]
    expect_errors(change, [
        ({"ticket_ref": "ydeo7fe", **TABLE}, "is in_progress; only placed tickets can change their table"),
        ({"ticket_ref": "cmYq04O", **TABLE}, "is delivery; only dine_in tickets can change their table information"),
        ({"ticket_ref": "tu3v0ld", **TABLE, "zone": " "}, "invalid argument zone"),
        ({"ticket_ref": "tu3v0ld", **TABLE, "seat_count": 0}, "invalid argument seat_count"),
        ({"ticket_ref": "tu3v0ld", **TABLE, "seat_count": 2.5}, "invalid argument seat_count"),
    ])
    assert database.changed == {}
    done = json.loads(change.call({"ticket_ref": "tu3v0ld", **TABLE, "seat_count": 6.0}).output)
    assert done["old_table_info"] == {"zone": "Main Hall", "table_no": "A12", "seat_count": 4}
    stored = ticket(tools, "tu3v0ld")["table_info"]
    assert stored == TABLE and isinstance(stored["seat_count"], int)  # 6.0 is kept as the data's int


def test_payment_change_needs_one_payment_and_another_saved_instrument(restaurant):
    database, tools = restaurant
    change = tools["modify_ticket_payment"]
    expect_errors(change, [
        ({"ticket_ref": "42zqDqd", "instrument_ref": "5GZkMQk"}, "only placed tickets can change their payment"),
        ({"ticket_ref": "cmYq04O", "instrument_ref": "32WO76E"}, "must be different from the current one"),
        ({"ticket_ref": "cmYq04O", "instrument_ref": "C8R63h1"}, "'C8R63h1' is not a saved instrument of the ticket's"),
    ])
    assert database.changed == {}
    # every patron holds one instrument in the data: give VD6EWAX a second one to switch to
    saved = database.get(PATRONS, "VD6EWAX")["saved_instruments"]
    card = {"origin": "gift_card", "instrument_ref": "NEWCARD", "metadata": {"issuer": "Gift", "tail_digits": "0000"}}
    database.update(PATRONS, "VD6EWAX", "saved_instruments", {**saved, "NEWCARD": card})
    before = ticket(tools, "cmYq04O")["charges"]
    total = next(c["total"] for c in before if c["kind"] == "payment")
    done = json.loads(change.call({"ticket_ref": "cmYq04O", "instrument_ref": "NEWCARD"}).output)
    added = [{"kind": "payment", "total": total, "instrument_ref": "NEWCARD"},
             {"kind": "refund", "total": total, "instrument_ref": "32WO76E"}]
    assert [done["payment"], done["refund"]] == added and ticket(tools, "cmYq04O")["charges"] == [*before, *added]
    again = change.call({"ticket_ref": "cmYq04O", "instrument_ref": "32WO76E"})
    assert "has 2 payment charges; a payment instrument change needs exactly one" in again.error


def test_plate_change_needs_another_plate_of_the_same_dish_served_today(restaurant):
    database, tools = restaurant
    change = tools["modify_ticket_plates"]
    expect_errors(change, [
        ({**PLATES, "ticket_ref": "gh5ic0M", "plate_refs": ["TvCGrmk"], "new_plate_refs": ["mn1mEsg"]},
         "is in_progress; only placed tickets can change their plates"),
        ({**PLATES, "new_plate_refs": ["TvCGrmk", "TvCGrmk"]}, "must be the same length"),
        ({**PLATES, "plate_refs": ["TvCGrmk"]}, "1 x 'TvCGrmk' requested but ticket 'tZoV7rl' has none"),
        ({**PLATES, "plate_refs": ["mn1mEsg"] * 2, "new_plate_refs": ["TvCGrmk"] * 2}, "has only 1"),
        ({**PLATES, "new_plate_refs": ["SknHzVX"]}, "belongs to dish 'oCBGWNl', not to dish 'TtBjGxz'"),
        ({**PLATES, "new_plate_refs": ["mn1mEsg"]}, "must be another plate of the same dish"),
        ({**PLATES, "new_plate_refs": ["NOPLATE"]}, "no plate with plate_ref 'NOPLATE'"),
        ({**PLATES, "instrument_ref": "32WO76E"}, "'32WO76E' is not a saved instrument"),
        ({**PLATES, "plate_refs": []}, "invalid argument plate_refs"),
    ])
    selections = database.get(MENU, "TtBjGxz")["selections"]
    database.update(MENU, "TtBjGxz", "selections",
                    {**selections, "TvCGrmk": {**selections["TvCGrmk"], "served_today": False}})
    expect_errors(change, [(PLATES, "'TvCGrmk' is not served today")])
    database.update(MENU, "TtBjGxz", "selections", selections)
    assert database.changed == {}

    charges = ticket(tools, "tZoV7rl")["charges"]
    dearer = json.loads(change.call(PLATES).output)
    paid = {"kind": "payment", "total": 15.0, "instrument_ref": "gh5ic0M"}
    assert dearer["difference"] == 15.0 and dearer["charge"] == paid
    after = ticket(tools, "tZoV7rl")
    assert after["charges"] == [*charges, paid]
    assert (after["line_entries"][0]["plate_ref"], after["line_entries"][0]["cost"]) == ("TvCGrmk", 110.0)
    assert after["line_entries"][0]["mods"] == database.domain.base[TICKETS]["tZoV7rl"]["line_entries"][0]["mods"]
    cheaper = json.loads(change.call({**PLATES, "plate_refs": ["TvCGrmk"], "new_plate_refs": ["mn1mEsg"]}).output)
    assert cheaper["charge"] == {"kind": "refund", "total": 15.0, "instrument_ref": "gh5ic0M"}


def test_plate_change_matches_duplicates_by_position_and_an_even_swap_moves_no_money(restaurant):
    database, tools = restaurant
    change = tools["modify_ticket_plates"]
    line = database.get(TICKETS, "tZoV7rl")["line_entries"][0]
    database.update(TICKETS, "tZoV7rl", "line_entries", [line, line, {**line, "plate_ref": "TvCGrmk", "cost": 110.0}])
    charges = ticket(tools, "tZoV7rl")["charges"]
    swap = {**PLATES, "plate_refs": ["mn1mEsg", "TvCGrmk"], "new_plate_refs": ["TvCGrmk", "mn1mEsg"]}
    even = json.loads(change.call(swap).output)
    assert even["difference"] == 0 and even["charge"] is None and ticket(tools, "tZoV7rl")["charges"] == charges
    assert [e["plate_ref"] for e in even["line_entries"]] == ["TvCGrmk", "mn1mEsg", "mn1mEsg"]
    both = json.loads(change.call({**PLATES, "plate_refs": ["mn1mEsg"] * 2, "new_plate_refs": ["TvCGrmk"] * 2}).output)
    assert both["difference"] == 30.0 and [e["cost"] for e in both["line_entries"]] == [110.0] * 3


def test_the_modifications_are_done_and_refused_in_generated_tasks_and_none_is_dropped(shared_data):
    domain, tasks = checked_action_tasks(shared_data, "restaurant")
    drafted = action_drafts(Generator(domain, 0, stream="actions"))
    assert len(tasks) == len(drafted)  # verification keeps every draft
    done = Counter(t.meta["gold_actions"][-1]["name"] for t in tasks if t.meta["family"] == "action_write")
    refused = Counter(call["name"] for t in tasks if t.meta["family"] == "action_refusal"
                      for call in t.meta["refused_actions"])
    # every patron holds a single instrument, the one that paid: a payment change can only be refused
    assert all(done[name] for name in NEW_TOOLS if name != "modify_ticket_payment") and not done["modify_ticket_payment"]
    assert all(refused[name] >= 10 for name in NEW_TOOLS)
    for task in tasks:
        if task.meta["family"] == "action_refusal":
            names = {call["name"] for call in task.meta["refused_actions"]}
            assert {rule["name"] for rule in task.meta["forbidden_actions"]} == names
            assert not names & {call["name"] for call in task.meta["gold_actions"]}
