"""The console's two languages: English (the keys) and Chinese, with RocketMQ's own Chinese terms
(主题, 消费者组, 消息, 堆积, 死信队列 ...). A missing translation shows the English text."""
from __future__ import annotations

ZH = {
    "Cluster": "集群", "Topics": "主题", "Groups": "消费者组", "Messages": "消息", "Store": "存储",
    "Labs": "实验", "Metrics": "指标", "Language": "语言", "Log out": "退出", "Log in": "登录",
    "Broker": "Broker", "Role": "角色", "Addresses": "地址", "NameServers": "NameServer",
    "Disk use": "磁盘使用率", "Put TPS": "生产 TPS", "Get TPS": "消费 TPS", "Replication": "主从复制",
    "replication lag (bytes)": "复制延迟（字节）", "Listeners": "监听端口", "Thresholds": "阈值",
    "Topic": "主题", "Read queues": "读队列数", "Write queues": "写队列数", "Permission": "权限",
    "Messages stored": "消息总数", "Create or update a topic": "创建或更新主题", "Create / update": "创建/更新",
    "Delete": "删除", "Queue": "队列", "Min offset": "最小位点", "Max offset": "最大位点",
    "Retained from": "最早消息时间", "Retained to": "最新消息时间", "Kafka topic configs": "Kafka 主题配置",
    "Group": "消费者组", "Lag": "堆积量", "Consume TPS": "消费 TPS", "Members": "成员",
    "Broker offset": "Broker 位点", "Consumer offset": "消费位点", "Reset offsets by time": "按时间重置位点",
    "Reset": "重置", "Retry messages": "重试消息", "DLQ messages": "死信消息",
    "Resend from DLQ": "从死信队列重发", "Resend": "重发", "Kafka groups": "Kafka 消费者组",
    "Query by key": "按 Key 查询", "Query by message ID": "按 Message ID 查询",
    "Query by queue offset": "按队列位点查询", "Query by time range": "按时间范围查询", "Query": "查询",
    "Key": "Key", "Message ID": "Message ID", "Offset": "位点", "Begin": "开始时间", "End": "结束时间",
    "Body": "消息体", "Properties": "属性", "Tags": "标签", "Store time": "存储时间",
    "Send a test message": "发送测试消息", "Send": "发送", "Where it lives": "存储位置",
    "commitlog offset": "CommitLog 位点", "consumequeue slot": "ConsumeQueue 条目", "index slot": "索引槽位",
    "Download the body": "下载消息体", "No message found.": "未找到消息。",
    "CommitLog files": "CommitLog 文件", "File": "文件", "Fill": "写入进度", "ConsumeQueue entries": "ConsumeQueue 条目",
    "Index chain for a key": "索引链（按 Key）", "Dispatch (reput) lag": "分发（Reput）延迟",
    "Flush progress": "刷盘进度", "Delay queues": "延时队列", "Delay level": "延时级别",
    "Backlog": "积压", "Next due": "下次投递", "Transactions": "事务消息", "Half messages": "半消息",
    "Op messages": "Op 消息", "Points to": "指向", "Size": "大小", "Tags code": "Tag 哈希",
    "Reports": "报告", "No lab reports here yet.": "还没有实验报告。", "Error": "错误",
    "Account": "账号", "AccessKey": "AccessKey", "SecretKey": "SecretKey", "Live": "实时",
    "Previous": "上一页", "Next": "下一页", "Show": "显示", "Text": "文本", "JSON": "JSON", "Hex": "十六进制",
    "Done": "完成", "Consumer groups": "消费者组", "Client": "客户端", "State": "状态",
}

LANGS = ("en", "zh")


def translate(text: str, lang: str) -> str:
    if lang == "zh":
        return ZH.get(text, text)
    return text
