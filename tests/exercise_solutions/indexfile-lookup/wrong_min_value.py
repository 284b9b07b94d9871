# forgets that abs(Integer.MIN_VALUE) does not fit: RocketMQ maps it to 0
import struct

HEADER_SIZE, SLOT_SIZE, ITEM_SIZE = 40, 4, 20


def key_hash(key):
    h = 0
    for ch in key:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    if h >= 2**31:
        h -= 2**32
    return abs(h)


def slot_position(hash_code, slot_num):
    return HEADER_SIZE + (hash_code % slot_num) * SLOT_SIZE


def item_position(slot_num, index):
    return HEADER_SIZE + slot_num * SLOT_SIZE + index * ITEM_SIZE


def find(data, slot_num, topic, key):
    h = key_hash(f"{topic}#{key}")
    n = struct.unpack_from(">i", data, slot_position(h, slot_num))[0]
    out, steps = [], 0
    while n > 0 and steps < len(data):
        kh, phy, _diff, prev = struct.unpack_from(">iqii", data, item_position(slot_num, n))
        if kh == h:
            out.append(phy)
        n, steps = prev, steps + 1
    return out
