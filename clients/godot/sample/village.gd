extends Node
# A headless Godot world hosting five Ori through the Egbe edge: it registers them with their
# identities, streams their perception at 20 Hz, has the player speak to Kunle, hears Kunle's reply
# and applies every action it gets back. Each step prints one line "EGBE <json>" for a machine to read.
#
# Settings from the environment: EGBE_EDGE_URL (http://127.0.0.1:50057), EGBE_TOKEN (a world token),
# EGBE_WORLD (godot-village).

const EgbeClient = preload("res://addons/egbe/egbe_client.gd")

const TENANT = "godot"
const PLAYER_ID = "player-1"
const SPEAK_TICK = 20  # the tick the player speaks to Kunle on
const TICKS_AFTER_REPLY = 10  # ticks streamed after the reply arrives, to see the world go on
const MAX_TICKS = 600  # 30 s of world time: no reply by then is a failure
const MAX_IN_FLIGHT = 8  # ticks sent and not yet answered before the world waits
const LISTENER = "kunle"
const VILLAGERS = [
	["adaeze", "Adaeze the smith", "smith", 5200, "I am Adaeze, the village smith."],
	["kunle", "Kunle", "apprentice smith", 7400, "I am Kunle, Adaeze's apprentice at the forge."],
	["bisi", "Bisi the baker", "baker", 8100, "I am Bisi; my bread feeds the village."],
	["tobi", "Tobi", "ferryman", 3900, "I am Tobi, who takes people across the river."],
	["ngozi", "Ngozi the healer", "healer", 6600, "I am Ngozi, the village healer."],
]

var world_id := "godot-village"
var client
var slots := {}  # ori id -> slot
var ori_of := {}  # slot -> ori id
var state := {}  # slot -> {"action": kind, "said": text}: what the world applied
var applied := {}  # action kind -> count
var next_tick := 1
var expected_answer := 1
var answered := 0
var out_of_order := 0
var reply_tick := 0
var finished := false
var timer: Timer


func _ready() -> void:
	var url = OS.get_environment("EGBE_EDGE_URL")
	world_id = OS.get_environment("EGBE_WORLD") if OS.has_environment("EGBE_WORLD") else world_id
	client = EgbeClient.new()
	add_child(client)
	client.configure(url if url != "" else "http://127.0.0.1:50057", OS.get_environment("EGBE_TOKEN"))
	client.connect("stream_opened", self, "_on_stream_opened")
	client.connect("stream_response", self, "_on_tick_answered")
	client.connect("stream_ended", self, "_on_stream_ended")
	timer = Timer.new()
	timer.wait_time = 0.05  # 20 Hz
	add_child(timer)
	timer.connect("timeout", self, "_send_tick")
	client.call_unary("KernelService", "RegisterAgents", _registration())
	var answer = yield(client, "rpc_completed")
	if answer[2] != null:
		_log({"event": "error", "rpc": answer[0], "status": answer[2]})
		_finish(false)
		return
	var given = answer[1]["slots"]
	for i in range(VILLAGERS.size()):
		slots[VILLAGERS[i][0]] = int(given[i])
		ori_of[int(given[i])] = VILLAGERS[i][0]
	_log({"event": "registered", "slots": slots, "registered_total": EgbeClient.u64(answer[1], "registeredTotal")})
	client.open_stream("KernelService", "StreamTicks")


func _registration() -> Dictionary:
	var agents = []
	for villager in VILLAGERS:
		agents.append({
			"ori": {"tenantId": TENANT, "worldId": world_id, "oriId": villager[0]},
			"traits": {"warmthBp": villager[3], "curiosityBp": 5000},
			"identity": {
				"displayName": villager[1],
				"vocation": villager[2],
				"home": "The river village",
				"locale": "en-US",
				"persona": villager[4],
			},
		})
	return {"worldId": world_id, "agents": agents}


func _on_stream_opened(_method: String) -> void:
	timer.start()


func _send_tick() -> void:
	if finished or next_tick - expected_answer >= MAX_IN_FLIGHT:
		return
	if next_tick > MAX_TICKS or (reply_tick > 0 and next_tick > reply_tick + TICKS_AFTER_REPLY):
		timer.stop()
		return
	var listener = slots[LISTENER]
	var speaking = next_tick == SPEAK_TICK
	var frames = []
	for slot in ori_of.keys():
		frames.append({
			"slot": slot,
			"onScreen": slot == listener,
			"sceneCopresence": slot == listener,
			"playerProximityMm": 1200 if slot == listener else 8000 + 1000 * slot,
			"addressedByPlayerId": 1 if speaking and slot == listener else 0,
		})
	var batch = {"worldId": world_id, "tick": str(next_tick), "frames": frames}
	if speaking:
		var line = "Kunle, is the forge hot enough for the plough share?"
		batch["situations"] = [{
			"slot": listener,
			"playerLine": {"speakerId": PLAYER_ID, "speakerName": "the traveller", "text": line},
			"place": "the smithy",
			"nearby": ["Adaeze the smith"],
		}]
		_log({"event": "spoke", "tick": next_tick, "slot": listener, "ori_id": LISTENER, "text": line})
	client.send({"batch": batch})
	next_tick += 1


func _on_tick_answered(response: Dictionary) -> void:
	var actions = EgbeClient.field(response["result"], "actions", {})
	var tick = EgbeClient.u64(actions, "tick")
	if tick != expected_answer:
		out_of_order += 1
	expected_answer = tick + 1
	answered += 1
	var intents = EgbeClient.field(actions, "intents", [])
	for intent in intents:
		_apply(tick, intent)
	_log({"event": "answered", "tick": tick, "intents": intents.size()})
	if reply_tick > 0 and tick >= reply_tick + TICKS_AFTER_REPLY:
		_finish(true)
	elif tick >= MAX_TICKS:
		_finish(false)


# What a game does with an action: here, the Ori's current action and the last thing it said.
func _apply(tick: int, intent: Dictionary) -> void:
	var slot = int(EgbeClient.field(intent, "slot", 0))
	var kind = EgbeClient.field(intent, "kind", "ACTION_KIND_UNSPECIFIED")
	applied[kind] = applied.get(kind, 0) + 1
	state[slot] = {"action": kind, "said": state.get(slot, {}).get("said", "")}
	var speech = EgbeClient.speech_of(intent)
	if speech.empty():
		return
	state[slot]["said"] = speech.get("text", "")
	if speech.get("addressed_to", "") == PLAYER_ID and reply_tick == 0:
		reply_tick = tick
		_log({
			"event": "reply",
			"tick": tick,
			"slot": slot,
			"ori_id": ori_of.get(slot, ""),
			"text": speech.get("text", ""),
			"addressed_to": speech.get("addressed_to", ""),
			"heard_tick": int(speech.get("heard_tick", 0)),
			"source": speech.get("source", ""),
		})


func _finish(ok: bool) -> void:
	if finished:
		return
	finished = true
	timer.stop()
	ok = ok and out_of_order == 0 and answered == next_tick - 1
	_log({
		"event": "done",
		"ok": ok,
		"ticks_sent": next_tick - 1,
		"ticks_answered": answered,
		"out_of_order": out_of_order,
		"reply_tick": reply_tick,
		"applied": applied,
	})
	client.close_stream()
	get_tree().quit(0 if ok else 1)


func _on_stream_ended(error: Dictionary, close_code: int) -> void:
	if not finished:
		_log({"event": "error", "rpc": "KernelService/StreamTicks", "status": error, "close_code": close_code})
		_finish(false)


func _log(entry: Dictionary) -> void:
	print("EGBE " + JSON.print(entry))
