"""School policy actions (envs/toolscale/actions/school.py): registration, modification and cancellation
enforce the policy's rules with clear errors and write what they should; the action families are
generated, all verified and split by student."""

from __future__ import annotations

import json

from _toolscale_checks import checked_action_tasks, expect_errors, tools_of

from toolorchestra.envs.toolscale.actions import action_drafts, domain_specs
from toolorchestra.envs.toolscale.tasks import (
    Generator,
)

# KD7EKME's registration GO1ZSB7 (2025-SPRING, undergraduate, health insurance yes) holds XNMQ98S (Mon/Wed
# 09:00-09:50, 3 credits, tuition 1350) and EDZVQJM (Tue/Thu 11:00-12:15, 4 credits, tuition 1800), paid
# by PAY-0001 (1500) and PAY-0002 (500); the student's one saved method is Q184LC5.
STUDENT, REGISTRATION, METHOD = "KD7EKME", "GO1ZSB7", "Q184LC5"
OPEN_SPRING, FULL_SPRING, CLASHING_SPRING = "E9KON6B", "F32TWQ4", "ABBQ410"  # 3 credits open; full; Mon/Wed 9:00
FALL_4, FALL_3 = "G0CR3PX", "N4Q81OI"  # 2025-FALL: 4 credits (24 of 25 enrolled), 3 credits
OTHER_REGISTRATION = "2ZLODR2"  # another student's




def read(tools, name: str, **arguments) -> dict:
    return json.loads(tools[name].call(arguments).output)




def test_register_courses_needs_one_term_open_courses_no_conflict_and_exact_payment(shared_data):
    database, tools = tools_of(shared_data, "school")
    register = tools["register_courses"]
    ok = {"student_id": STUDENT, "term": "2025-FALL", "study_level": "undergraduate",
          "courses": [{"course_id": FALL_4}, {"course_id": FALL_3, "grading_option": "pass/fail"}],
          "health_insurance": "yes", "payments": [{"payment_id": METHOD, "amount": 3800.0}]}  # 7 x 500 + 300
    spring = {**ok, "term": "2025-SPRING"}
    expect_errors(register, [
        ({**ok, "term": "fall-2025"}, "is not YYYY-TERM"),
        ({**ok, "courses": [{"course_id": FALL_4}, {"course_id": "XNMQ98S"}]},
         "'XNMQ98S' is in term 2025-SPRING, not 2025-FALL"),
        ({**spring, "courses": [{"course_id": FULL_SPRING}]}, f"course {FULL_SPRING!r} (BIO-2203) is full"),
        ({**spring, "courses": [{"course_id": "XNMQ98S"}, {"course_id": CLASHING_SPRING}]},
         "schedule conflict: courses 'XNMQ98S' and 'ABBQ410' overlap on Monday"),
        ({**ok, "courses": [{"course_id": FALL_4}, {"course_id": FALL_4}]}, "a course_id is listed twice"),
        ({**ok, "courses": [{"course_id": "NOPE"}]}, "no course with course_id 'NOPE'"),
        ({**ok, "payments": [{"payment_id": "PAY-0001", "amount": 3800.0}]},
         "payments.0.payment_id 'PAY-0001' is not a saved payment method of student 'KD7EKME'"),
        ({**ok, "payments": [{"payment_id": METHOD, "amount": 3500.0}]},
         "the total due is 3800 (tuition 3500 + health insurance fee 300); an initial registration must be paid"),
        ({**ok, "payments": [{"payment_id": METHOD, "amount": float("nan")}]}, "invalid argument payments.0.amount"),
        ({**ok, "payments": [{"payment_id": METHOD, "amount": 0}]}, "invalid argument payments.0.amount"),
        ({**ok, "study_level": "doctoral"}, "invalid argument study_level"),
        ({**ok, "student_id": "NOPE"}, "no student with student_id 'NOPE'"),
    ])
    assert database.changed == {}
    split = [{"payment_id": METHOD, "amount": 3000.0}, {"payment_id": METHOD, "amount": 500.0}]
    done = json.loads(register.call({**ok, "health_insurance": "no", "payments": split}).output)
    key = done["registration_id"]
    assert done["total_due"] == 3500.0
    record = read(tools, "get_registration", registration_id=key)
    assert record["student_id"] == STUDENT and record["term"] == "2025-FALL" and record["status"] == "part-time"
    assert record["total_credits"] == 7 and record["overload_credits"] == 0 and record["health_insurance"] == "no"
    assert [(c["course_id"], c["grading_option"], c["tuition"]) for c in record["courses"]] == [
        (FALL_4, "letter", 2000.0), (FALL_3, "pass/fail", 1500.0)]
    assert record["payment_history"] == split
    assert read(tools, "get_student", student_id=STUDENT)["registrations"] == [REGISTRATION, key]
    assert read(tools, "get_course", course_id=FALL_4)["current_enrollment"] == 25  # now full
    assert f"course {FALL_4!r} (LITR-3455) is full" in register.call(ok).error


def test_modify_registration_keeps_term_and_insurance_and_settles_the_tuition_difference(shared_data):
    database, tools = tools_of(shared_data, "school")
    modify = tools["modify_registration"]
    mine = {"student_id": STUDENT, "registration_id": REGISTRATION}
    add = {**mine, "add_courses": [{"course_id": OPEN_SPRING}]}
    expect_errors(modify, [
        ({**mine, "health_insurance": "no", "drop_course_ids": ["XNMQ98S"]},
         "health insurance cannot be changed after the initial registration"),
        (mine, "nothing to change"),
        ({**add, "registration_id": OTHER_REGISTRATION}, "'2ZLODR2' is not a registration of student 'KD7EKME'"),
        ({**mine, "add_courses": [{"course_id": FALL_3}]}, "is in term 2025-FALL, not 2025-SPRING"),
        ({**mine, "add_courses": [{"course_id": FULL_SPRING}]}, "is full"),
        ({**mine, "add_courses": [{"course_id": CLASHING_SPRING}]}, "schedule conflict"),
        ({**mine, "add_courses": [{"course_id": "XNMQ98S"}]}, "'XNMQ98S' is already in registration"),
        ({**mine, "drop_course_ids": ["NOPE"]}, "course 'NOPE' is not in registration 'GO1ZSB7'"),
        ({**mine, "drop_course_ids": ["XNMQ98S", "EDZVQJM"]}, "to drop every course, cancel the registration"),
        ({**mine, "grading_changes": [{"course_id": "XNMQ98S", "grading_option": "letter"}]},
         "already has grading option 'letter'"),
        ({**mine, "grading_changes": [{"course_id": "EDZVQJM", "grading_option": "audit"}],
          "drop_course_ids": ["EDZVQJM"]}, "'EDZVQJM' is not a kept course"),
        (add, "the tuition increases by 1500: a single saved payment method (payment_id) is required"),
        ({**add, "payment_id": "PAY-0001"}, "payment_id 'PAY-0001' is not a saved payment method"),
        ({**mine, "grading_changes": [{"course_id": "XNMQ98S", "grading_option": "audit"}], "payment_id": METHOD},
         "the tuition does not change"),
    ])
    assert database.changed == {}
    added = json.loads(modify.call({**add, "payment_id": METHOD}).output)
    assert added["tuition_difference"] == 1500.0 and added["payment"] == {"payment_id": METHOD, "amount": 1500.0}
    record = added["registration"]
    assert record["total_credits"] == 10 and record["status"] == "part-time"
    assert record["payment_history"][-1] == {"payment_id": METHOD, "amount": 1500.0}
    assert read(tools, "get_course", course_id=OPEN_SPRING)["current_enrollment"] == 29
    dropped = json.loads(modify.call({**mine, "drop_course_ids": ["EDZVQJM"]}).output)
    assert dropped["tuition_difference"] == -1800.0  # the stored tuition comes back
    assert dropped["payment"] == {"payment_id": METHOD, "amount": -1800.0}  # the latest positive payment
    assert dropped["registration"]["total_credits"] == 6
    assert read(tools, "get_course", course_id="EDZVQJM")["current_enrollment"] == 39
    graded = json.loads(modify.call({**mine, "health_insurance": "yes",  # unchanged: allowed
                                     "grading_changes": [{"course_id": "XNMQ98S", "grading_option": "audit"}]}).output)
    assert graded["payment"] is None and graded["registration"]["payment_history"] == dropped["registration"][
        "payment_history"]
    assert [c["grading_option"] for c in graded["registration"]["courses"]] == ["audit", "letter"]


def test_cancel_registration_drops_every_course_and_refunds_each_payment(shared_data):
    database, tools = tools_of(shared_data, "school")
    cancel = tools["cancel_registration"]
    mine = {"student_id": STUDENT, "registration_id": REGISTRATION}
    expect_errors(cancel, [({**mine, "registration_id": OTHER_REGISTRATION}, "is not a registration of student"),
                           ({**mine, "registration_id": "NOPE"}, "no registration with registration_id 'NOPE'"),
                           ({**mine, "student_id": "NOPE"}, "no student with student_id 'NOPE'")])
    assert database.changed == {}
    done = json.loads(cancel.call(mine).output)
    assert done["refunds"] == [{"payment_id": "PAY-0001", "amount": -1500.0},
                               {"payment_id": "PAY-0002", "amount": -500.0}]
    record = read(tools, "get_registration", registration_id=REGISTRATION)
    assert record["status"] == "canceled" and record["courses"] == [] and record["total_credits"] == 0
    assert record["payment_history"][-2:] == done["refunds"]
    assert read(tools, "get_course", course_id="XNMQ98S")["current_enrollment"] == 27
    assert read(tools, "get_course", course_id="EDZVQJM")["current_enrollment"] == 39
    assert "is canceled" in cancel.call(mine).error
    assert "is canceled" in tools["modify_registration"].call({**mine, "drop_course_ids": ["XNMQ98S"]}).error
    # an earlier refund counts against its payment: only what is still paid comes back
    database, tools = tools_of(shared_data, "school")
    assert not tools["modify_registration"].call({**mine, "drop_course_ids": ["XNMQ98S"],
                                                  "payment_id": "PAY-0001"}).error  # -1350 to PAY-0001
    refunds = json.loads(tools["cancel_registration"].call(mine).output)["refunds"]
    assert refunds == [{"payment_id": "PAY-0001", "amount": -150.0}, {"payment_id": "PAY-0002", "amount": -500.0}]


def test_school_action_families_are_all_verified_and_split_by_student(shared_data):
    domain, actions = checked_action_tasks(shared_data, "school")
    assert len(actions) == len(action_drafts(Generator(domain, 0, stream="actions")))  # none dropped
    writes = {spec.name for spec in domain_specs(domain) if spec.writes}
    used = {t.meta["gold_actions"][-1]["name"] for t in actions if t.meta["family"] == "action_write"}
    assert used == {"register_courses", "modify_registration", "cancel_registration"}
    for task in actions:
        if task.meta["family"] == "action_refusal":  # the forbidden request is in the task and fails
            assert task.meta["refused_actions"] and not task.meta["writes"]
            assert not {call["name"] for call in task.meta["gold_actions"]} & writes
            assert task.meta["forbidden_actions"][0]["name"] == task.meta["refused_actions"][0]["name"]
