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

static int decode_frame(const uint8_t *p, const uint8_t *end, int64_t *row, uint64_t *progress) {
    memset(row, 0, ROW_COLUMNS * sizeof(int64_t));
    *progress = 0;
    while (p < end) {
        uint64_t key, value;
        if (read_varint(&p, end, &key)) return -1;
        const uint32_t field = (uint32_t)(key >> 3), wire_type = (uint32_t)(key & 7);
        if (wire_type != 0 || field == 0 || field > MAX_FRAME_FIELD) {
            if (skip_field(&p, end, wire_type)) return -1;
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
            if (skip_field(&p, end, wire_type)) return -1;
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
                              const uint32_t *ori_offsets,
                              uint8_t *out, size_t cap) {
    uint8_t *w = out;
    /* One intent is at most: 2 + 6 (slot) + 1 + 5 + id (ori_id) + 5 * 6 (the rest) bytes. */
    for (uint32_t i = 0; i < count; i++) {
        const uint32_t slot = slots[i];
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
