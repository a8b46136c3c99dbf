// egbe-world-client: a minimal world server in C++, built from protos/ alone.
//
// It registers agents with a kernel, streams ticks over StreamTicks alternating the row and the
// columnar encodings, checks every answer against the protocol's rules, sends a tick that goes
// backwards and expects INVALID_ARGUMENT, and prints one JSON line. It proves an engine team can
// integrate with Egbe from the .proto files and stock gRPC C++.
//
//   egbe-world-client --target 127.0.0.1:50051 --token "$EGBE_WORLD_TOKEN" --agents 64 --ticks 20
//   egbe-world-client --target unix:/run/egbe/kernel.sock ...
//   egbe-world-client --target kernel:50051 --ca ca.pem [--cert c.pem --key k.pem] ...   (TLS/mTLS)
//
// Exit codes: 0 every check passed; 1 a check failed; 2 bad usage; 3 an RPC failed.

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "egbe/v1/kernel.grpc.pb.h"

namespace {

using egbe::v1::KernelService;

struct Options {
  std::string target = "127.0.0.1:50051";
  std::string token;
  std::string world_id;
  std::string ca_file, cert_file, key_file;
  uint32_t agents = 64;
  uint64_t ticks = 20;
};

// A failed protocol check: the answer broke a rule of egbe-protocol.
struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failed RPC, with its status.
struct RpcFailed : std::runtime_error {
  RpcFailed(const std::string& rpc, const grpc::Status& status)
      : std::runtime_error(status.error_message()), rpc(rpc), code(status.error_code()) {}
  std::string rpc;
  grpc::StatusCode code;
};

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

std::string JsonString(const std::string& text) {
  std::ostringstream out;
  out << '"';
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out << '\\' << c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out << ' ';
    } else {
      out << c;
    }
  }
  out << '"';
  return out.str();
}

void Require(bool condition, const std::string& what) {
  if (!condition) throw CheckFailed(what);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot read " + path);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::shared_ptr<grpc::Channel> OpenChannel(const Options& options) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(64 * 1024 * 1024);
  arguments.SetMaxSendMessageSize(64 * 1024 * 1024);
  if (options.ca_file.empty()) {
    return grpc::CreateCustomChannel(options.target, grpc::InsecureChannelCredentials(), arguments);
  }
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = ReadFile(options.ca_file);
  if (!options.cert_file.empty()) {
    tls.pem_cert_chain = ReadFile(options.cert_file);
    tls.pem_private_key = ReadFile(options.key_file);
  }
  return grpc::CreateCustomChannel(options.target, grpc::SslCredentials(tls), arguments);
}

void Authorize(grpc::ClientContext& context, const Options& options) {
  context.AddMetadata("authorization", "Bearer " + options.token);
}

// Little-endian packing, as the columnar layout specifies (whatever this machine's byte order).
template <typename T>
void AppendLittleEndian(std::string& column, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    column.push_back(static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xFF));
  }
}

// Deterministic signals for agent `slot` at `tick`: a few on screen, needs that drift.
struct Signals {
  egbe::v1::VisualLod lod;
  int32_t proximity_mm;
  bool on_screen, open_crossroads, player_nearby;
  uint32_t goal_ref;
  uint64_t progress;
  uint32_t need_bp[4];
  uint32_t fatigue_bp;
};

Signals SignalsFor(uint32_t slot, uint64_t tick) {
  Signals s{};
  s.on_screen = slot % 16 == 0;
  s.lod = s.on_screen ? egbe::v1::VISUAL_LOD_NEAR : egbe::v1::VISUAL_LOD_FAR;
  s.proximity_mm = s.on_screen ? 3000 : 2147483647;
  s.open_crossroads = slot % 97 == 3 && tick % 10 == 0;
  s.player_nearby = slot % 8 == 0;
  s.goal_ref = 1 + slot % 5;
  s.progress = tick / 4;
  for (uint32_t i = 0; i < 4; ++i) s.need_bp[i] = static_cast<uint32_t>((slot * 131 + tick * 17 + i * 1000) % 10001);
  s.fatigue_bp = static_cast<uint32_t>((tick * 50) % 10001);
  return s;
}

egbe::v1::PerceptionBatch RowBatch(const std::string& world, uint64_t tick, const std::vector<uint32_t>& slots) {
  egbe::v1::PerceptionBatch batch;
  batch.set_world_id(world);
  batch.set_tick(tick);
  for (uint32_t slot : slots) {
    const Signals s = SignalsFor(slot, tick);
    auto* frame = batch.add_frames();
    frame->set_slot(slot);
    frame->set_visual_lod(s.lod);
    frame->set_player_proximity_mm(s.proximity_mm);
    frame->set_on_screen(s.on_screen);
    frame->set_open_crossroads(s.open_crossroads);
    frame->set_player_nearby_in_world(s.player_nearby);
    frame->set_goal_ref(s.goal_ref);
    frame->set_goal_progress_signature(s.progress);
    frame->set_need_safety_bp(s.need_bp[0]);
    frame->set_need_sustaining_bp(s.need_bp[1]);
    frame->set_need_social_bp(s.need_bp[2]);
    frame->set_need_purpose_bp(s.need_bp[3]);
    frame->set_fatigue_bp(s.fatigue_bp);
  }
  return batch;
}

// A full columnar frame: `count` = every registered agent, row i is slot i.
egbe::v1::PerceptionBatch ColumnarBatch(const std::string& world, uint64_t tick, uint32_t registered) {
  egbe::v1::PerceptionBatch batch;
  batch.set_world_id(world);
  batch.set_tick(tick);
  auto* columns = batch.mutable_columns();
  columns->set_layout_version(1);
  columns->set_count(registered);
  std::string flags, lod, proximity, addressed, goal, progress, safety, sustaining, social, purpose, fatigue;
  for (uint32_t slot = 0; slot < registered; ++slot) {
    const Signals s = SignalsFor(slot, tick);
    uint16_t bits = 0;
    if (s.on_screen) bits |= 1u << egbe::v1::PERCEPTION_FLAG_BIT_ON_SCREEN;
    if (s.open_crossroads) bits |= 1u << egbe::v1::PERCEPTION_FLAG_BIT_OPEN_CROSSROADS;
    if (s.player_nearby) bits |= 1u << egbe::v1::PERCEPTION_FLAG_BIT_PLAYER_NEARBY_IN_WORLD;
    AppendLittleEndian<uint16_t>(flags, bits);
    AppendLittleEndian<uint8_t>(lod, static_cast<uint8_t>(s.lod));
    AppendLittleEndian<int32_t>(proximity, s.proximity_mm);
    AppendLittleEndian<uint32_t>(addressed, 0);
    AppendLittleEndian<uint32_t>(goal, s.goal_ref);
    AppendLittleEndian<uint64_t>(progress, s.progress);
    AppendLittleEndian<uint16_t>(safety, static_cast<uint16_t>(s.need_bp[0]));
    AppendLittleEndian<uint16_t>(sustaining, static_cast<uint16_t>(s.need_bp[1]));
    AppendLittleEndian<uint16_t>(social, static_cast<uint16_t>(s.need_bp[2]));
    AppendLittleEndian<uint16_t>(purpose, static_cast<uint16_t>(s.need_bp[3]));
    AppendLittleEndian<uint16_t>(fatigue, static_cast<uint16_t>(s.fatigue_bp));
  }
  columns->set_signal_flags(flags);
  columns->set_visual_lod(lod);
  columns->set_player_proximity_mm(proximity);
  columns->set_addressed_by_player_id(addressed);
  columns->set_goal_ref(goal);
  columns->set_goal_progress_signature(progress);
  columns->set_need_safety_bp(safety);
  columns->set_need_sustaining_bp(sustaining);
  columns->set_need_social_bp(social);
  columns->set_need_purpose_bp(purpose);
  columns->set_fatigue_bp(fatigue);
  return batch;
}

std::vector<uint32_t> Register(KernelService::Stub& kernel, const Options& options, uint32_t* registered_total) {
  egbe::v1::RegisterAgentsRequest request;
  request.set_world_id(options.world_id);
  for (uint32_t i = 0; i < options.agents; ++i) {
    auto* agent = request.add_agents();
    agent->mutable_ori()->set_tenant_id("cpp-client");
    agent->mutable_ori()->set_world_id(options.world_id);
    agent->mutable_ori()->set_ori_id("ori-" + std::to_string(i));
    auto* traits = agent->mutable_traits();
    traits->set_warmth_bp((i * 1237) % 10001);
    traits->set_curiosity_bp((i * 2311) % 10001);
    traits->set_caution_bp((i * 3347) % 10001);
    traits->set_ambition_bp((i * 4409) % 10001);
    traits->set_conscientiousness_bp(5000);
    traits->set_candor_bp(5000);
    traits->set_defiance_bp((i * 577) % 10001);
    traits->set_playfulness_bp((i * 911) % 10001);
    auto* value = agent->add_values();
    value->set_domain(egbe::v1::VALUE_DOMAIN_KINSHIP);
    value->set_weight_bp(8000);
  }
  egbe::v1::RegisterAgentsResponse reply;
  grpc::ClientContext context;
  Authorize(context, options);
  const grpc::Status status = kernel.RegisterAgents(&context, request, &reply);
  if (!status.ok()) throw RpcFailed("RegisterAgents", status);
  Require(reply.slots_size() == static_cast<int>(options.agents), "RegisterAgents answers one slot per agent");
  std::vector<uint32_t> slots(reply.slots().begin(), reply.slots().end());
  Require(std::set<uint32_t>(slots.begin(), slots.end()).size() == slots.size(), "slots are distinct");
  Require(reply.registered_total() >= options.agents, "registered_total counts every agent");
  for (uint32_t slot : slots) Require(slot < reply.registered_total(), "slots are dense");
  *registered_total = reply.registered_total();
  return slots;
}

void CheckRowAnswer(const egbe::v1::TickResult& result, const Options& options, uint64_t tick,
                    const std::vector<uint32_t>& slots) {
  const auto& actions = result.actions();
  Require(actions.world_id() == options.world_id, "row answer names the world");
  Require(actions.tick() == tick, "row answer names the tick");
  Require(actions.columns().count() == 0, "a row batch is answered in rows");
  Require(actions.intents_size() == static_cast<int>(slots.size()), "one intent per agent in the batch");
  std::set<uint32_t> asked(slots.begin(), slots.end()), answered;
  for (const auto& intent : actions.intents()) {
    Require(asked.count(intent.slot()) == 1, "intents address slots of the batch");
    Require(egbe::v1::ActionKind_IsValid(intent.kind()) && intent.kind() != egbe::v1::ACTION_KIND_UNSPECIFIED,
            "every intent has an action kind");
    answered.insert(intent.slot());
  }
  Require(answered == asked, "every agent of the batch is answered exactly once");
}

void CheckColumnarAnswer(const egbe::v1::TickResult& result, const Options& options, uint64_t tick,
                         uint32_t registered) {
  const auto& actions = result.actions();
  Require(actions.world_id() == options.world_id, "columnar answer names the world");
  Require(actions.tick() == tick, "columnar answer names the tick");
  Require(actions.intents_size() == 0, "a columnar batch is answered in columns");
  const auto& columns = actions.columns();
  const size_t n = columns.count();
  Require(columns.layout_version() == 1, "action columns use layout 1");
  Require(n == registered, "a full frame is answered for every registered agent");
  Require(columns.slots().empty() || columns.slots().size() == 4 * n, "slots column is empty or uint32[count]");
  Require(columns.kind().size() == n, "kind column is uint8[count]");
  Require(columns.source().size() == n, "source column is uint8[count]");
  Require(columns.tier().size() == n, "tier column is uint8[count]");
  Require(columns.priority().size() == 2 * n, "priority column is uint16[count]");
  Require(columns.goal_ref().size() == 4 * n, "goal_ref column is uint32[count]");
  Require(columns.plan_step().size() == 2 * n, "plan_step column is uint16[count]");
  Require(columns.tier_reason().size() == n, "tier_reason column is uint8[count]");
  for (size_t i = 0; i < n; ++i) {
    const int kind = static_cast<unsigned char>(columns.kind()[i]);
    const int tier = static_cast<unsigned char>(columns.tier()[i]);
    Require(egbe::v1::ActionKind_IsValid(kind) && kind != egbe::v1::ACTION_KIND_UNSPECIFIED, "kinds are actions");
    Require(egbe::v1::CognitionTier_IsValid(tier) && tier != egbe::v1::COGNITION_TIER_UNSPECIFIED,
            "every agent holds a tier");
  }
}

void CheckReport(const egbe::v1::TickResult& result, const Options& options, uint64_t tick) {
  const auto& report = result.report();
  Require(report.world_id() == options.world_id && report.tick() == tick, "the report names world and tick");
  Require(report.core() == "c" || report.core() == "numpy", "the report names the tick core");
}

int Run(const Options& options) {
  auto channel = OpenChannel(options);
  auto kernel = KernelService::NewStub(channel);

  uint32_t registered = 0;
  const std::vector<uint32_t> slots = Register(*kernel, options, &registered);
  uint32_t registered_again = 0;
  Require(Register(*kernel, options, &registered_again) == slots, "re-registering returns the same slots");
  Require(registered_again == registered, "re-registering adds no agent");

  grpc::ClientContext stream_context;
  Authorize(stream_context, options);
  auto stream = kernel->StreamTicks(&stream_context);
  uint64_t row_ticks = 0, columnar_ticks = 0, over_budget = 0, max_elapsed_us = 0;
  for (uint64_t tick = 1; tick <= options.ticks; ++tick) {
    const bool columnar = tick % 2 == 0;
    egbe::v1::StreamTicksRequest request;
    *request.mutable_batch() =
        columnar ? ColumnarBatch(options.world_id, tick, registered) : RowBatch(options.world_id, tick, slots);
    if (!stream->Write(request)) break;
    egbe::v1::StreamTicksResponse reply;
    if (!stream->Read(&reply)) break;
    if (columnar) {
      CheckColumnarAnswer(reply.result(), options, tick, registered);
      ++columnar_ticks;
    } else {
      CheckRowAnswer(reply.result(), options, tick, slots);
      ++row_ticks;
    }
    CheckReport(reply.result(), options, tick);
    over_budget += reply.result().report().over_latency_budget() ? 1 : 0;
    max_elapsed_us = std::max<uint64_t>(max_elapsed_us, reply.result().report().elapsed_micros());
  }
  stream->WritesDone();
  const grpc::Status stream_status = stream->Finish();
  if (!stream_status.ok()) throw RpcFailed("StreamTicks", stream_status);
  Require(row_ticks + columnar_ticks == options.ticks, "one answer per tick, in order");

  // Bad input: a tick that goes backwards is refused whole.
  egbe::v1::TickRequest backwards;
  *backwards.mutable_batch() = RowBatch(options.world_id, options.ticks > 1 ? options.ticks - 1 : 0, slots);
  egbe::v1::TickResponse ignored;
  grpc::ClientContext backwards_context;
  Authorize(backwards_context, options);
  const grpc::Status refused = kernel->Tick(&backwards_context, backwards, &ignored);
  Require(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT, "a tick going backwards is INVALID_ARGUMENT");

  std::cout << "{\"ok\": true, \"world_id\": " << JsonString(options.world_id) << ", \"agents\": " << options.agents
            << ", \"registered_total\": " << registered << ", \"row_ticks\": " << row_ticks
            << ", \"columnar_ticks\": " << columnar_ticks << ", \"ticks_over_budget\": " << over_budget
            << ", \"max_tick_elapsed_us\": " << max_elapsed_us << ", \"backwards_tick\": \"INVALID_ARGUMENT\"}"
            << std::endl;
  return 0;
}

bool ParseOptions(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const std::string value = argv[++i];
    if (flag == "--target") options->target = value;
    else if (flag == "--token") options->token = value;
    else if (flag == "--world-id") options->world_id = value;
    else if (flag == "--ca") options->ca_file = value;
    else if (flag == "--cert") options->cert_file = value;
    else if (flag == "--key") options->key_file = value;
    else if (flag == "--agents") options->agents = static_cast<uint32_t>(std::stoul(value));
    else if (flag == "--ticks") options->ticks = std::stoull(value);
    else return false;
  }
  if (options->token.empty()) {
    const char* from_env = std::getenv("EGBE_WORLD_TOKEN");
    if (from_env != nullptr) options->token = from_env;
  }
  if (options->world_id.empty()) options->world_id = "cpp-client-" + std::to_string(getpid());
  return !options->token.empty() && options->agents > 0 && options->ticks > 0 &&
         options->cert_file.empty() == options->key_file.empty();
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    if (!ParseOptions(argc, argv, &options)) {
      std::cerr << "usage: egbe-world-client --target HOST:PORT|unix:PATH --token TOKEN (or EGBE_WORLD_TOKEN)\n"
                   "       [--agents N] [--ticks N] [--world-id ID] [--ca CA.pem [--cert C.pem --key K.pem]]\n";
      return 2;
    }
    return Run(options);
  } catch (const RpcFailed& failed) {
    std::cout << "{\"ok\": false, \"rpc\": " << JsonString(failed.rpc) << ", \"code\": \"" << CodeName(failed.code)
              << "\", \"message\": " << JsonString(failed.what()) << "}" << std::endl;
    return 3;
  } catch (const CheckFailed& failed) {
    std::cout << "{\"ok\": false, \"check\": " << JsonString(failed.what()) << "}" << std::endl;
    return 1;
  } catch (const std::exception& error) {
    std::cerr << "egbe-world-client: " << error.what() << std::endl;
    return 2;
  }
}
