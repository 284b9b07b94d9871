def allocate(consumer_group, current_cid, mq_all, cid_all):
    if current_cid not in cid_all:
        return []
    index, n = cid_all.index(current_cid), len(cid_all)
    return [q for i, q in enumerate(mq_all) if i % n == index]
