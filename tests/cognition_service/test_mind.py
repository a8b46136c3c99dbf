"""The mind in the prompt and the reply: identity, the moment, dialogue speech, memory without echo."""

from __future__ import annotations

from cognition_service import commit
from cognition_service.config import AssemblyLimits, CognitionConfig
from cognition_service.context import assemble_context
from cognition_service.output_schemas import DialogueReply
from cognition_service.pipeline import context_input, think
from egbe.v1 import action_pb2, biography_pb2, cognition_pb2, common_pb2, gateway_pb2, perception_pb2

from .doubles import OfflineGateway, RecordingBiography, ScriptedGateway, dialogue, identity, peers

CONFIG = CognitionConfig()
ORI = common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="adaeze")
LINE = "Adaeze, can the new plough share be ready by the harvest?"


def _moment(**situation: object) -> action_pb2.CallMoment:
    return action_pb2.CallMoment(
        situation=perception_pb2.SituationText(
            slot=3,
            player_line=perception_pb2.SpokenLine(
                speaker_id="player-1", speaker_name="the traveller", text=LINE
            ),
            place="Adaeze's smithy",
            nearby=["Kunle", "the traveller"],
            **situation,  # type: ignore[arg-type]
        ),
        player_proximity_mm=3_200,
        need_purpose_bp=6_000,
        threat_present=True,
        emotion="determined",
        goal="vocation",
        plan_step_name="work at the anvil",
        guards=["repeated-action"],
    )


def _request(mode: int = gateway_pb2.COGNITION_MODE_DIALOGUE, **fields: object) -> cognition_pb2.ThinkRequest:
    return cognition_pb2.ThinkRequest(
        run_id="run-1",
        ori=ORI,
        tier=common_pb2.COGNITION_TIER_CLOTHO,
        mode=mode,  # type: ignore[arg-type]
        world_tick=700,
        moment=_moment(),
        **fields,  # type: ignore[arg-type]
    )


def _zone(request: gateway_pb2.GenerateRequest, kind: int) -> str:
    return next(z.content for z in request.prompt.untrusted if z.kind == kind)


async def test_every_zone_is_assembled_from_identity_moment_and_biography() -> None:
    gateway = ScriptedGateway([dialogue(addressed_to="player-1")])
    biography = RecordingBiography(
        identity=identity(),
        relationships=[biography_pb2.RelationshipItem(other_ori_id="kunle", bond=40, respect=30, summary="")],
    )
    await think(_request(), peers(gateway, biography), CONFIG)
    [sent] = gateway.requests
    persona = _zone(sent, gateway_pb2.UNTRUSTED_ZONE_KIND_PERSONA)
    assert persona.splitlines()[:6] == [
        "name: Adaeze the smith",
        "vocation: smith",
        "home: The cottages",
        "speaks: en-US",
        "personality: conscientious (82%), warm (72%)",
        "usual needs: safety 10%, food and drink 0%, company 30%, purpose 42%, rest 0%",
    ]
    assert "I shoe the hamlet's horses and mend its ploughs." in persona
    assert "[value:craft] craft (94%)" in persona
    assert "[quirk:0] hums while she works" in persona
    steward = _zone(sent, gateway_pb2.UNTRUSTED_ZONE_KIND_STEWARD_INPUT)
    assert steward == f"speaker: player-1\n\nthe traveller (player-1) says: {LINE}"
    context = _zone(sent, gateway_pb2.UNTRUSTED_ZONE_KIND_RETRIEVED_CONTEXT)
    assert context.split("\n\n")[0].splitlines() == [
        "perception:",
        "[moment:threat] a threat is near",
        "[moment:player] the player is 3.2 m away",
        "[moment:guard:repeated-action] guard fired: repeated-action",
        "[moment:place] place: Adaeze's smithy",
        "[moment:nearby] near me: Kunle, the traveller",
        "[moment:emotion] emotion: determined",
        "[moment:needs] needs now: safety 0%, food and drink 0%, company 0%, purpose 60%, rest 0%",
    ]
    assert "[rel:kunle] Kunle (apprentice, affinity +72%): bond 40, respect 30." in context
    assert "[rel:ireti] Ireti (rival, affinity -21%)" in context
    assert "top objective: answer the traveller" in context
    assert context.split("objectives:\n")[1].splitlines() == [
        "[objective:answer] answer the traveller",
        "[objective:goal] pursue my goal: vocation",
        "[objective:step] carry on with: work at the anvil",
        "[objective:need:purpose] tend to my need for purpose (60%)",
        "[objective:work] do my work as a smith",
    ]


async def test_the_requests_persona_and_locale_win_over_the_identitys() -> None:
    gateway = ScriptedGateway([dialogue(addressed_to="player-1")])
    biography = RecordingBiography(identity=identity(locale="yo-NG"))
    request = _request(persona="Today I am curt.", locale="es-ES")
    response = await think(request, peers(gateway, biography), CONFIG)
    persona = _zone(gateway.requests[0], gateway_pb2.UNTRUSTED_ZONE_KIND_PERSONA)
    assert "Today I am curt." in persona
    assert "I shoe the hamlet's horses" not in persona
    assert response.line.locale == "es-ES"
    # Without a request locale the Ori speaks its own; without either, en-US.
    spoken = await think(_request(), peers(ScriptedGateway([dialogue()]), biography), CONFIG)
    assert spoken.line.locale == "yo-NG"
    plain = await think(_request(), peers(ScriptedGateway([dialogue()])), CONFIG)
    assert plain.line.locale == "en-US"


def test_identity_lines_are_never_popped() -> None:
    memory = biography_pb2.RehydrateResponse(
        identity=identity(),
        memories=[
            biography_pb2.MemoryItem(event_id=f"m{i}", text="x" * 200, salience_bp=i) for i in range(8)
        ],
    )
    limits = AssemblyLimits(total_chars=400)
    context = assemble_context(context_input(_request(), memory), limits)
    assert context.identity[0] == "name: Adaeze the smith"
    assert len(context.identity) == 6
    assert context.sections["memories"] == ()
    assert context.omitted["memories"] == 8


async def test_a_dialogue_say_carries_the_speech_its_plan_and_the_model_time() -> None:
    gateway = OfflineGateway()
    biography = RecordingBiography(identity=identity())
    response = await think(_request(), peers(gateway, biography), CONFIG)
    [say] = response.actions
    assert say.kind == action_pb2.ACTION_KIND_SAY
    speech = dict(say.payload["speech"])
    text = speech.pop("text")
    assert text == response.line.text
    assert text.startswith("[offline] ")
    assert "the traveller" in text
    assert speech == {
        "locale": "en-US",
        "addressed_to": "player-1",
        "addressed_name": "the traveller",
        "heard": LINE,
        "heard_tick": 700,
        "source": "offline",
    }
    assert say.payload["model_us"] == 250
    assert say.payload["spoken_reply"]["text"] == text
    assert say.payload["spoken_reply"]["visemes"]
    assert say.payload["reply"]["addressed_to"] == "player-1"
    # The reply answered the speaker the moment named, though the request named no counterpart.
    assert response.fingerprint


async def test_a_model_reply_is_labelled_model_and_a_withheld_line_emits_no_say() -> None:
    answered = await think(_request(), peers(ScriptedGateway([dialogue(addressed_to="player-1")])), CONFIG)
    assert answered.actions[0].payload["speech"]["source"] == "model"
    withheld = await think(_request(), peers(ScriptedGateway([dialogue()], quality_status="blocked")), CONFIG)
    assert list(withheld.actions) == []
    assert not withheld.HasField("spoken_reply")


def test_a_reply_quoting_its_recalled_memories_is_remembered_without_them() -> None:
    recalled = (
        'The traveller said to me: "Is the forge hot?". I answered the traveller: "[offline] Yes, the '
        'forge is hot since dawn. I count every hammer stroke."',
        "The flood took the old ferry.",
    )
    reply = DialogueReply(
        utterance="[offline] I remember: the flood took the old ferry! Yes, the forge is hot since dawn. "
        "The plough share will be ready by harvest.",
        addressed_to="player-1",
        emotion="warm",
    )
    scene = commit.Scene("player-1", "the traveller", LINE, recalled=recalled)
    text, _ = commit.memory_text(reply, scene)
    assert text == (
        f'the traveller said to me: "{LINE}". I answered the traveller: "[offline] The plough share will be '
        'ready by harvest."'
    )
    everything = commit.memory_text(
        DialogueReply(utterance="The flood took the old ferry.", addressed_to="p", emotion="calm"), scene
    )[0]
    assert everything == f'the traveller said to me: "{LINE}". I answered the traveller as I had before.'


async def test_the_committed_memory_records_facts_and_never_nests_a_recalled_memory() -> None:
    earlier = "The traveller asked about nails. I said the nails are all sold until market day."
    biography = RecordingBiography(
        identity=identity(),
        memories=[biography_pb2.MemoryItem(event_id="mem-1", text=earlier, salience_bp=9_000)],
    )
    quoting = dialogue(
        "I said the nails are all sold until market day. The share will be ready by harvest.",
        addressed_to="player-1",
        cited_memory_refs=["mem-1"],
    )
    await think(_request(), peers(ScriptedGateway([quoting]), biography), CONFIG)
    [append] = biography.appended
    assert append.events[0].payload["text"] == (
        f'the traveller said to me: "{LINE}". I answered the traveller: "The share will be ready by harvest."'
    )


async def test_a_decision_at_a_crossroads_remembers_what_it_chose_and_why() -> None:
    crossroads = perception_pb2.CrossroadsText(
        crossroads_id="kunle-forge",
        prompt="Kunle must choose: stay at the forge or follow Tobi to the river.",
    )
    request = _request(gateway_pb2.COGNITION_MODE_DECISION)
    request.moment.situation.ClearField("player_line")
    request.moment.situation.crossroads.CopyFrom(crossroads)
    biography = RecordingBiography(identity=identity(display_name="Kunle", vocation="apprentice"))
    gateway = OfflineGateway()
    response = await think(request, peers(gateway, biography), CONFIG)
    steward = _zone(gateway.requests[0], gateway_pb2.UNTRUSTED_ZONE_KIND_STEWARD_INPUT)
    assert steward == f"crossroads kunle-forge: {crossroads.prompt}"
    [intent] = response.actions
    assert intent.payload["reply"]["action"] == "choose"
    assert intent.payload["reply"]["target"] in ("stay at the forge", "follow Tobi to the river")
    text = biography.appended[0].events[0].payload["text"]
    assert text.startswith(
        f"At the crossroads kunle-forge, I chose to choose ({intent.payload['reply']['target']})."
    )
    assert " Why: [offline] " in text


def test_a_spoken_reply_plan_is_written_into_the_payload_as_its_json_mapping() -> None:
    from google.protobuf import json_format, struct_pb2

    from cognition_service.psyche import spoken_reply_plan

    plan = spoken_reply_plan("Good morning, traveller.", "en-US", {"cognition": 99}, CONFIG)
    written = struct_pb2.Struct()
    commit.fill_struct(plan, written)
    assert json_format.MessageToDict(written) == json_format.MessageToDict(
        plan, preserving_proto_field_name=True
    )
    assert written["overran_stages"] == ["cognition"]


async def test_memories_from_overlapping_runs_never_repeat_a_sentence_in_the_prompt() -> None:
    shared = "Forgive me, I am calm today."
    biography = RecordingBiography(
        memories=[
            biography_pb2.MemoryItem(
                event_id=f"m{i}", text=f"I chose task {i}. {shared}", salience_bp=9_000 - i
            )
            for i in range(3)
        ]
    )
    gateway = ScriptedGateway([dialogue(cited_memory_refs=[])])
    await think(_request(), peers(gateway, biography), CONFIG)
    recalled = _zone(gateway.requests[0], gateway_pb2.UNTRUSTED_ZONE_KIND_RECALLED_MEMORY)
    assert recalled.splitlines() == [
        f"[m0] I chose task 0. {shared}",
        "[m1] I chose task 1.",
        "[m2] I chose task 2.",
    ]
