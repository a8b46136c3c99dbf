/* The row form's wire codec: PerceptionFrame rows in, ActionIntent rows out, no Python object per row.
 * kernel_service/perception_codec.py and tick_result.py hold the pure-Python equivalents; tests keep
 * the two identical. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "moirai_core_decls.h"

enum { ROW_COLUMNS = 17, PROGRESS_FIELD = 11, FRAME_FIELD = 3, MAX_FRAME_FIELD = 18 };

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *value) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end) return -1;
        const uint8_t byte = *(*p)++;
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *value = result;
            return 0;
        }
    }
    return -1;
}

/* How deep groups may nest inside a skipped group: upb's default recursion limit, so whatever the
 * Python codec parsed, this skips. */
enum { MAX_GROUP_DEPTH = 100 };

static int skip_field(const uint8_t **p, const uint8_t *end, uint32_t wire_type) {
    uint64_t length;
    switch (wire_type) {
    case 0: return read_varint(p, end, &length);
    case 1: if (end - *p < 8) return -1; *p += 8; return 0;
    case 2:
        if (read_varint(p, end, &length) || length > (uint64_t)(end - *p)) return -1;
        *p += length;
        return 0;
    case 5: if (end - *p < 4) return -1; *p += 4; return 0;
    default: return -1;
    }
}

/* An unknown group (wire type 3, deprecated but valid protobuf): skipped up to its matching end tag. */
static int skip_group(const uint8_t **p, const uint8_t *end, uint32_t field) {
    uint32_t open[MAX_GROUP_DEPTH];
    uint32_t depth = 0;
    open[depth++] = field;
    while (depth) {
        uint64_t key;
        if (read_varint(p, end, &key)) return -1;
        const uint32_t number = (uint32_t)(key >> 3), wire_type = (uint32_t)(key & 7);
        if (wire_type == 3) {
            if (depth == MAX_GROUP_DEPTH) return -1;
            open[depth++] = number;
        } else if (wire_type == 4) {
            if (open[--depth] != number) return -1;
        } else if (skip_field(p, end, wire_type)) {
            return -1;
        }
    }
    return 0;
}

/* Any field a reader does not take, by its key: groups included. */
static int skip_unknown(const uint8_t **p, const uint8_t *end, uint64_t key) {
    const uint32_t wire_type = (uint32_t)(key & 7);
    return wire_type == 3 ? skip_group(p, end, (uint32_t)(key >> 3)) : skip_field(p, end, wire_type);
}

static int decode_frame(const uint8_t *p, const uint8_t *end, int64_t *row, uint64_t *progress) {
    memset(row, 0, ROW_COLUMNS * sizeof(int64_t));
    *progress = 0;
    while (p < end) {
        uint64_t key, value;
        if (read_varint(&p, end, &key)) return -1;
        const uint32_t field = (uint32_t)(key >> 3), wire_type = (uint32_t)(key & 7);
        if (wire_type != 0 || field == 0 || field > MAX_FRAME_FIELD) {
            if (skip_unknown(&p, end, key)) return -1;
            continue;
        }
        if (read_varint(&p, end, &value)) return -1;
        if (field == PROGRESS_FIELD) {
            *progress = value;
            continue;
        }
        const uint32_t column = field < PROGRESS_FIELD ? field - 1 : field - 2;
        /* int32 travels as a sign-extended 64-bit varint; uint32, enums and bools as themselves. */
        row[column] = field == 3 ? (int64_t)(int32_t)(uint32_t)value : (int64_t)(value & 0xFFFFFFFFu);
        if (field == 5 || field == 6 || field == 7 || field == 8 || field == 9 || field == 17 || field == 18)
            row[column] = value != 0;
    }
    return 0;
}

int64_t moirai_decode_rows(const uint8_t *buf, size_t len, uint32_t max_rows, int64_t *table, uint64_t *progress) {
    const uint8_t *p = buf, *const end = buf + len;
    int64_t rows = 0;
    while (p < end) {
        uint64_t key;
        if (read_varint(&p, end, &key)) return -1;
        const uint32_t field = (uint32_t)(key >> 3), wire_type = (uint32_t)(key & 7);
        if (field != FRAME_FIELD || wire_type != 2) {
            if (skip_unknown(&p, end, key)) return -1;
            continue;
        }
        uint64_t length;
        if (read_varint(&p, end, &length) || length > (uint64_t)(end - p)) return -1;
        if (rows >= max_rows) return -2;
        if (decode_frame(p, p + length, table + rows * ROW_COLUMNS, progress + rows)) return -1;
        p += length;
        rows++;
    }
    return rows;
}

static uint8_t *put_varint(uint8_t *out, uint64_t value) {
    while (value >= 0x80) {
        *out++ = (uint8_t)(value | 0x80);
        value >>= 7;
    }
    *out++ = (uint8_t)value;
    return out;
}

static uint8_t *put_field(uint8_t *out, uint32_t field, uint64_t value) {
    if (value == 0) return out;
    *out++ = (uint8_t)(field << 3);
    return put_varint(out, value);
}

int64_t moirai_encode_intents(uint32_t count, const uint32_t *slots, const uint8_t *kind, const uint32_t *goal_ref,
                              const uint16_t *priority, const uint8_t *tier, const uint8_t *source,
                              const uint16_t *plan_step, const uint8_t *tier_reason, const uint8_t *ori_blob,
                              const uint32_t *ori_offsets, uint32_t n_ori,
                              uint8_t *out, size_t cap) {
    uint8_t *w = out;
    /* One intent is at most: 2 + 6 (slot) + 1 + 5 + id (ori_id) + 5 * 6 (the rest) bytes. */
    for (uint32_t i = 0; i < count; i++) {
        const uint32_t slot = slots[i];
        if (slot >= n_ori) return -2;
        const uint32_t id_start = ori_offsets[slot], id_len = ori_offsets[slot + 1] - id_start;
        if ((size_t)(w - out) + 64u + id_len > cap) return -1;
        uint8_t body[64];
        uint8_t *b = body;
        b = put_field(b, 1, slot);
        const size_t head = (size_t)(b - body);
        uint8_t tail[48];
        uint8_t *t = tail;
        t = put_field(t, 3, kind[slot]);
        t = put_field(t, 4, goal_ref[slot]);
        t = put_field(t, 5, priority[slot]);
        t = put_field(t, 6, tier[slot]);
        t = put_field(t, 7, source[slot]);
        t = put_field(t, 8, plan_step[slot]);
        t = put_field(t, 10, tier_reason[slot]);
        uint8_t id_header[6];
        uint8_t *h = id_header;
        if (id_len) {
            *h++ = (2 << 3) | 2;
            h = put_varint(h, id_len);
        }
        const size_t length = head + (size_t)(h - id_header) + id_len + (size_t)(t - tail);
        *w++ = (3 << 3) | 2;
        w = put_varint(w, length);
        memcpy(w, body, head);
        w += head;
        memcpy(w, id_header, (size_t)(h - id_header));
        w += h - id_header;
        memcpy(w, ori_blob + id_start, id_len);
        w += id_len;
        memcpy(w, tail, (size_t)(t - tail));
        w += t - tail;
    }
    return (int64_t)(w - out);
}

/* A length-delimited field from a string table entry (nothing when empty, as protobuf omits it). */
static uint8_t *put_string(uint8_t *out, uint32_t field, const uint8_t *blob, const uint32_t *offsets, uint32_t i) {
    const uint32_t start = offsets[i], len = offsets[i + 1] - start;
    if (!len) return out;
    *out++ = (uint8_t)((field << 3) | 2);
    out = put_varint(out, len);
    memcpy(out, blob + start, len);
    return out + len;
}

static uint8_t *put_decimal(uint8_t *out, uint64_t value) {
    uint8_t digits[20];
    int n = 0;
    do {
        digits[n++] = (uint8_t)('0' + value % 10);
        value /= 10;
    } while (value);
    while (n) *out++ = digits[--n];
    return out;
}

int64_t moirai_encode_candidates(uint32_t count, const uint32_t *slots, const uint8_t *cause, const uint8_t *tier,
                                 const uint8_t *bits, const int64_t *tokens, const int64_t *costs,
                                 const int32_t *group_of, uint64_t tick, const uint8_t *world, uint32_t world_len,
                                 const uint8_t *ori_blob, const uint32_t *ori_offsets, uint32_t n_ori,
                                 const uint8_t *tenant_blob, const uint32_t *tenant_offsets, uint32_t n_tenant,
                                 const uint8_t *route_blob, const uint32_t *route_offsets, uint32_t n_route,
                                 const uint8_t *group_blob, const uint32_t *group_offsets, uint32_t n_group,
                                 uint8_t *out, size_t cap) {
    uint8_t *w = out;
    for (uint32_t i = 0; i < count; i++) {
        const uint32_t slot = slots[i];
        const uint32_t t = tier[i];
        /* Every index into a string table is checked: tiers and ids come from state a restore set. */
        if (slot >= n_ori || slot >= n_tenant || t >= n_route || (group_of[i] >= 0 && (uint32_t)group_of[i] >= n_group))
            return -2;
        const size_t ori_len = ori_offsets[slot + 1] - ori_offsets[slot];
        const size_t tenant_len = tenant_offsets[slot + 1] - tenant_offsets[slot];
        const size_t route_len = route_offsets[t + 1] - route_offsets[t];
        const size_t group_len = group_of[i] < 0 ? 0 : group_offsets[group_of[i] + 1] - group_offsets[group_of[i]];
        /* Strings plus their headers, the call id's digits, and at most 11 bytes per scalar field. */
        const size_t most = 2 * world_len + ori_len + tenant_len + route_len + group_len + 64 + 12 * 11;
        if ((size_t)(w - out) + most > cap) return -1;
        /* The body goes 12 bytes on (room for the two headers), then moves back behind them. */
        uint8_t *const body = w + 12;
        uint8_t *b = body;
        /* 1: call_id "world:tick:slot:cause" */
        uint8_t id[96];
        uint8_t *d = id;
        d = put_decimal(d, tick);
        *d++ = ':';
        d = put_decimal(d, slot);
        *d++ = ':';
        d = put_decimal(d, cause[i]);
        const size_t id_len = world_len + 1 + (size_t)(d - id);
        *b++ = (1 << 3) | 2;
        b = put_varint(b, id_len);
        memcpy(b, world, world_len);
        b += world_len;
        *b++ = ':';
        memcpy(b, id, (size_t)(d - id));
        b += d - id;
        b = put_field(b, 2, slot);
        /* 3: ori {tenant_id 1, world_id 2, ori_id 3} */
        const size_t ori_body = (tenant_len ? 1 + (size_t)(put_varint(id, tenant_len) - id) + tenant_len : 0) +
                                (world_len ? 1 + (size_t)(put_varint(id, world_len) - id) + world_len : 0) +
                                (ori_len ? 1 + (size_t)(put_varint(id, ori_len) - id) + ori_len : 0);
        /* Always present (the Python writer sets its fields, which marks it set even when empty). */
        *b++ = (3 << 3) | 2;
        b = put_varint(b, ori_body);
        b = put_string(b, 1, tenant_blob, tenant_offsets, slot);
        if (world_len) {
            *b++ = (2 << 3) | 2;
            b = put_varint(b, world_len);
            memcpy(b, world, world_len);
            b += world_len;
        }
        b = put_string(b, 3, ori_blob, ori_offsets, slot);
        b = put_field(b, 4, t);
        b = put_field(b, 5, cause[i]);
        b = put_field(b, 6, (uint64_t)tokens[i]);
        b = put_field(b, 7, (uint64_t)costs[i]);
        b = put_string(b, 8, route_blob, route_offsets, t);
        b = put_field(b, 9, tick);
        if (group_of[i] >= 0) b = put_string(b, 10, group_blob, group_offsets, (uint32_t)group_of[i]);
        b = put_field(b, 11, bits[i] & 1);
        const size_t length = (size_t)(b - body);
        *w++ = (3 << 3) | 2; /* TickResult.candidates */
        w = put_varint(w, length);
        memmove(w, body, length);
        w += length;
    }
    return (int64_t)(w - out);
}
