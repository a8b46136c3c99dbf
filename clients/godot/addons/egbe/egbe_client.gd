extends Node
# Egbe's protocol from Godot 3, through the Egbe edge (docs/edge.md): unary RPCs as JSON POSTs to
# /v1/<Service>/<Method>, and a stream RPC (KernelService/StreamTicks) as one WebSocket whose frames
# are the requests and responses in protobuf's canonical JSON mapping.
#
# The mapping's rules a world meets: field names are lowerCamelCase, a field at its default value is
# left out (read with `field()`), 64-bit integers travel as strings (read with `u64()`), enums by name
# ("ACTION_KIND_SAY"). A refusal is a google.rpc.Status: {"code", "message", "details"}.

signal rpc_completed(method, response, error)
signal stream_opened(method)
signal stream_response(response)
signal stream_ended(error, close_code)

const NORMAL_CLOSURE = 1000
const UNAVAILABLE = 14

var edge_url := ""
var token := ""

var _http: HTTPRequest
var _pending_method := ""
var _socket: WebSocketClient
var _stream_method := ""
var _stream_error := {}
var _close_code := 0


func configure(url: String, bearer_token: String) -> void:
	edge_url = url.rstrip("/")
	token = bearer_token


func _ready() -> void:
	_http = HTTPRequest.new()
	add_child(_http)
	_http.connect("request_completed", self, "_on_request_completed")


# One unary RPC at a time: the answer comes as rpc_completed(method, response, error), with error
# null on success and the google.rpc.Status otherwise.
func call_unary(service: String, method: String, request: Dictionary) -> int:
	_pending_method = "%s/%s" % [service, method]
	var headers = ["Content-Type: application/json", "Authorization: Bearer " + token]
	return _http.request(
		"%s/v1/%s" % [edge_url, _pending_method], headers, true, HTTPClient.METHOD_POST, JSON.print(request)
	)


func _on_request_completed(result: int, code: int, _headers: PoolStringArray, body: PoolByteArray) -> void:
	if result != HTTPRequest.RESULT_SUCCESS:
		emit_signal("rpc_completed", _pending_method, {}, {"code": UNAVAILABLE, "message": "HTTP result %d" % result})
		return
	var parsed = JSON.parse(body.get_string_from_utf8())
	if parsed.error != OK or typeof(parsed.result) != TYPE_DICTIONARY:
		emit_signal("rpc_completed", _pending_method, {}, {"code": UNAVAILABLE, "message": "HTTP %d: not JSON" % code})
	elif code == 200:
		emit_signal("rpc_completed", _pending_method, parsed.result, null)
	else:
		emit_signal("rpc_completed", _pending_method, {}, parsed.result)


# Opens the stream; the token travels in the first frame (what a browser, which cannot set headers
# on a WebSocket, does too). Then `send()` each request; each answer arrives as stream_response.
func open_stream(service: String, method: String) -> int:
	_stream_method = "%s/%s" % [service, method]
	_stream_error = {}
	_close_code = 0
	_socket = WebSocketClient.new()
	_socket.connect("connection_established", self, "_on_established")
	_socket.connect("data_received", self, "_on_data")
	_socket.connect("server_close_request", self, "_on_close_request")
	_socket.connect("connection_closed", self, "_on_closed")
	_socket.connect("connection_error", self, "_on_connection_error")
	var url = edge_url.replace("https://", "wss://").replace("http://", "ws://")
	return _socket.connect_to_url("%s/v1/%s" % [url, _stream_method])


func send(request: Dictionary) -> int:
	return _socket.get_peer(1).put_packet(JSON.print(request).to_utf8())


func close_stream() -> void:
	if _socket != null:
		_socket.disconnect_from_host(NORMAL_CLOSURE, "done")


func _process(_delta: float) -> void:
	var socket = _socket  # held for the poll: a handler may drop _socket while it runs
	if socket != null:
		socket.poll()


func _on_established(_protocol: String) -> void:
	_socket.get_peer(1).set_write_mode(WebSocketPeer.WRITE_MODE_TEXT)
	send({"authorization": "Bearer " + token})
	emit_signal("stream_opened", _stream_method)


func _on_data() -> void:
	var peer = _socket.get_peer(1)
	while peer.get_available_packet_count() > 0:
		var parsed = JSON.parse(peer.get_packet().get_string_from_utf8())
		if parsed.error != OK or typeof(parsed.result) != TYPE_DICTIONARY:
			_stream_error = {"code": UNAVAILABLE, "message": "a frame that is not a JSON object"}
		elif parsed.result.has("error"):
			_stream_error = parsed.result["error"]  # the status that ends the stream; the close follows
		else:
			emit_signal("stream_response", parsed.result)


func _on_close_request(code: int, _reason: String) -> void:
	_close_code = code


func _on_closed(_was_clean: bool) -> void:
	_socket = null
	emit_signal("stream_ended", _stream_error, _close_code)


func _on_connection_error() -> void:
	_socket = null
	emit_signal("stream_ended", {"code": UNAVAILABLE, "message": "could not connect to the edge"}, 0)


# A field of a canonical-JSON message, or its default when the mapping left it out.
static func field(message: Dictionary, name: String, default = null):
	return message[name] if message.has(name) else default


# A 64-bit integer field (a string in the mapping), or a 32-bit one (a number), as an int.
static func u64(message: Dictionary, name: String) -> int:
	return int(field(message, name, 0))


# The "speech" of a SAY action, {} for any other: text, addressed_to, heard, heard_tick, source...
static func speech_of(intent: Dictionary) -> Dictionary:
	if field(intent, "kind", "") != "ACTION_KIND_SAY":
		return {}
	var payload = field(intent, "payload", {})
	return payload["speech"] if typeof(payload) == TYPE_DICTIONARY and payload.has("speech") else {}
