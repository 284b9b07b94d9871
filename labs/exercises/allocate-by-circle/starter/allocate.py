"""Exercise allocate-by-circle: fill in `allocate` (see task.md).

Every member of a consumer group runs the same function with the same sorted lists and keeps the
queues it returns for itself; together the members must cover every queue exactly once."""


def allocate(consumer_group, current_cid, mq_all, cid_all):
    """The queues of `mq_all` that the consumer `current_cid` consumes.

    consumer_group: the group's name (not needed for this strategy)
    current_cid:    this consumer's client id, one of cid_all
    mq_all:         every queue of the topic, sorted (broker name, then queue id)
    cid_all:        every consumer of the group, sorted

    Deal the queues like cards, one at a time round the consumers: queue i goes to the consumer
    at index i % len(cid_all). Return the queues in mq_all's order. A current_cid that is not in
    cid_all gets no queues (RocketMQ logs "[BUG] ... not in cidAll" and returns an empty list).
    """
    raise NotImplementedError("fill in allocate")
