# a typical mix-up: contiguous blocks (AllocateMessageQueueAveragely) instead of dealing by circle
def allocate(consumer_group, current_cid, mq_all, cid_all):
    if current_cid not in cid_all:
        return []
    index, n = cid_all.index(current_cid), len(cid_all)
    size = -(-len(mq_all) // n)
    return mq_all[index * size:(index + 1) * size]
