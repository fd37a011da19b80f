"""Protobuf message classes for the tests, built from descriptors (no protoc)."""

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    message_factory,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)

F = descriptor_pb2.FieldDescriptorProto


def _field(message, name, number, kind, type_name=None, repeated=False, optional=False):
    field = message.field.add(name=name, number=number, type=kind,
                              label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
    if type_name:
        field.type_name = type_name
    if optional:  # proto3 optional: a synthetic oneof of its own
        field.oneof_index = len(message.oneof_decl)
        field.proto3_optional = True
        message.oneof_decl.add(name=f"_{name}")
    return field


def shop_file(package="shop"):
    """shop/order.proto: Order (with a nested Line, a Status enum), then OrderKey."""
    proto = descriptor_pb2.FileDescriptorProto(name=f"{package}/order.proto",
                                               package=package, syntax="proto3")
    for dependency in ("google/protobuf/timestamp.proto", "google/protobuf/duration.proto",
                       "google/protobuf/wrappers.proto", "google/protobuf/struct.proto"):
        proto.dependency.append(dependency)
    status = proto.enum_type.add(name="Status")
    for number, name in enumerate(("NEW", "PAID", "SHIPPED")):
        status.value.add(name=name, number=number)
    order = proto.message_type.add(name="Order")
    line = order.nested_type.add(name="Line")
    _field(line, "sku", 1, F.TYPE_STRING)
    _field(line, "qty", 2, F.TYPE_INT32)
    entry = order.nested_type.add(name="TagsEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, F.TYPE_STRING)
    _field(entry, "value", 2, F.TYPE_STRING)
    _field(order, "id", 1, F.TYPE_INT64)
    _field(order, "small", 2, F.TYPE_SINT32)
    _field(order, "big", 3, F.TYPE_UINT64)
    _field(order, "price", 4, F.TYPE_DOUBLE)
    _field(order, "ratio", 5, F.TYPE_FLOAT)
    _field(order, "paid", 6, F.TYPE_BOOL)
    _field(order, "note", 7, F.TYPE_STRING)
    _field(order, "blob", 8, F.TYPE_BYTES)
    _field(order, "status", 9, F.TYPE_ENUM, f".{package}.Status")
    _field(order, "at", 10, F.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    _field(order, "took", 11, F.TYPE_MESSAGE, ".google.protobuf.Duration")
    _field(order, "coupon", 12, F.TYPE_MESSAGE, ".google.protobuf.Int64Value")
    _field(order, "extra", 13, F.TYPE_MESSAGE, ".google.protobuf.Struct")
    _field(order, "first", 14, F.TYPE_MESSAGE, f".{package}.Order.Line")
    _field(order, "lines", 15, F.TYPE_MESSAGE, f".{package}.Order.Line", repeated=True)
    _field(order, "tags", 16, F.TYPE_MESSAGE, f".{package}.Order.TagsEntry", repeated=True)
    _field(order, "maybe", 17, F.TYPE_INT32, optional=True)
    key = proto.message_type.add(name="OrderKey")
    _field(key, "id", 1, F.TYPE_INT64)
    return proto


def classes(package="shop"):
    """(Order, OrderKey, Order.Line) message classes of :func:`shop_file`."""
    pool = descriptor_pool.DescriptorPool()
    for module in (timestamp_pb2, duration_pb2, wrappers_pb2, struct_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.Add(shop_file(package))
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{n}"))
                 for n in ("Order", "OrderKey", "Order.Line"))


def serializer(registry, kind, topic, field="value"):
    """A confluent-kafka ProtobufSerializer of ``kind`` for ``topic``'s key or value.

    ``registry``: the registry's URL, or a client.
    """
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry}) if isinstance(registry, str) else registry
    made = ProtobufSerializer(kind, client, {"use.deprecated.format": False})
    context = SerializationContext(topic, MessageField.VALUE if field == "value"
                                   else MessageField.KEY)
    return lambda message: made(message, context)


def an_order(Order, i):
    order = Order(id=i, small=-i, big=2**64 - 1 - i, price=i + 0.25, ratio=0.5,
                  paid=i % 2 == 0, note=f"n{i}", blob=bytes([i]), status=i % 3)
    order.at.FromSeconds(1_700_000_000 + i)
    order.took.FromMilliseconds(1500)
    if i % 2:
        order.coupon.value = 10 * i
        order.maybe = i
    order.extra.update({"k": i, "s": "x"})
    order.first.sku = "first"
    order.lines.add(sku="a", qty=i)
    order.tags["t"] = "v"
    return order
