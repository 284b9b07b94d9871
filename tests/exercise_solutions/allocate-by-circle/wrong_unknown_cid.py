# forgets the consumer that is not in the list (raises ValueError from list.index)
def allocate(consumer_group, current_cid, mq_all, cid_all):
    index, n = cid_all.index(current_cid), len(cid_all)
    return [q for i, q in enumerate(mq_all) if i % n == index]
