/*
 * The part of librdkafka's public C API the columnar reader uses, declared here so the
 * extension builds without librdkafka's headers. The library itself is loaded at run time
 * (the one confluent-kafka ships or has loaded) and these functions resolved by name.
 *
 * The struct layouts below are librdkafka's stable public ABI (unchanged since 1.0).
 */
#ifndef KAFKA_DIRECT_RDKAFKA_ABI_H
#define KAFKA_DIRECT_RDKAFKA_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;
typedef struct rd_kafka_error_s rd_kafka_error_t;

typedef int rd_kafka_resp_err_t;
typedef int rd_kafka_conf_res_t;
typedef int rd_kafka_type_t;
typedef int rd_kafka_timestamp_type_t;

#define RD_KAFKA_CONSUMER 1
#define RD_KAFKA_CONF_OK 0
#define RD_KAFKA_RESP_ERR_NO_ERROR 0
#define RD_KAFKA_RESP_ERR__PARTITION_EOF (-191)
#define RD_KAFKA_RESP_ERR__FATAL (-150)
#define RD_KAFKA_TIMESTAMP_NOT_AVAILABLE 0

typedef struct rd_kafka_message_s {
    rd_kafka_resp_err_t err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;

typedef struct rd_kafka_topic_partition_s {
    char *topic;
    int32_t partition;
    int64_t offset;
    void *metadata;
    size_t metadata_size;
    void *opaque;
    rd_kafka_resp_err_t err;
    void *_private;
} rd_kafka_topic_partition_t;

typedef struct rd_kafka_topic_partition_list_s {
    int cnt;
    int size;
    rd_kafka_topic_partition_t *elems;
} rd_kafka_topic_partition_list_t;

/* X(return type, name, parameter list): every function resolved with dlsym. */
#define RDKAFKA_FUNCTIONS(X)                                                                  \
    X(int, rd_kafka_version, (void))                                                          \
    X(const char *, rd_kafka_version_str, (void))                                             \
    X(const char *, rd_kafka_err2str, (rd_kafka_resp_err_t))                                  \
    X(rd_kafka_conf_t *, rd_kafka_conf_new, (void))                                           \
    X(void, rd_kafka_conf_destroy, (rd_kafka_conf_t *))                                       \
    X(rd_kafka_conf_res_t, rd_kafka_conf_set,                                                 \
      (rd_kafka_conf_t *, const char *, const char *, char *, size_t))                        \
    X(rd_kafka_t *, rd_kafka_new, (rd_kafka_type_t, rd_kafka_conf_t *, char *, size_t))       \
    X(void, rd_kafka_destroy, (rd_kafka_t *))                                                 \
    X(rd_kafka_resp_err_t, rd_kafka_poll_set_consumer, (rd_kafka_t *))                        \
    X(rd_kafka_queue_t *, rd_kafka_queue_get_consumer, (rd_kafka_t *))                        \
    X(void, rd_kafka_queue_destroy, (rd_kafka_queue_t *))                                     \
    X(ssize_t, rd_kafka_consume_batch_queue,                                                  \
      (rd_kafka_queue_t *, int, rd_kafka_message_t **, size_t))                               \
    X(rd_kafka_message_t *, rd_kafka_consumer_poll, (rd_kafka_t *, int))                      \
    X(void, rd_kafka_message_destroy, (rd_kafka_message_t *))                                 \
    X(int64_t, rd_kafka_message_timestamp,                                                    \
      (const rd_kafka_message_t *, rd_kafka_timestamp_type_t *))                              \
    X(rd_kafka_resp_err_t, rd_kafka_message_headers,                                          \
      (const rd_kafka_message_t *, rd_kafka_headers_t **))                                    \
    X(rd_kafka_resp_err_t, rd_kafka_header_get_all,                                           \
      (const rd_kafka_headers_t *, size_t, const char **, const void **, size_t *))           \
    X(rd_kafka_topic_partition_list_t *, rd_kafka_topic_partition_list_new, (int))            \
    X(void, rd_kafka_topic_partition_list_destroy, (rd_kafka_topic_partition_list_t *))      \
    X(rd_kafka_topic_partition_t *, rd_kafka_topic_partition_list_add,                        \
      (rd_kafka_topic_partition_list_t *, const char *, int32_t))                             \
    X(rd_kafka_resp_err_t, rd_kafka_assign,                                                   \
      (rd_kafka_t *, const rd_kafka_topic_partition_list_t *))                                \
    X(rd_kafka_resp_err_t, rd_kafka_pause_partitions,                                         \
      (rd_kafka_t *, rd_kafka_topic_partition_list_t *))                                      \
    X(rd_kafka_resp_err_t, rd_kafka_resume_partitions,                                        \
      (rd_kafka_t *, rd_kafka_topic_partition_list_t *))                                      \
    X(rd_kafka_error_t *, rd_kafka_seek_partitions,                                           \
      (rd_kafka_t *, rd_kafka_topic_partition_list_t *, int))                                 \
    X(rd_kafka_resp_err_t, rd_kafka_position,                                                 \
      (rd_kafka_t *, rd_kafka_topic_partition_list_t *))                                      \
    X(rd_kafka_resp_err_t, rd_kafka_query_watermark_offsets,                                  \
      (rd_kafka_t *, const char *, int32_t, int64_t *, int64_t *, int))                       \
    X(rd_kafka_resp_err_t, rd_kafka_consumer_close, (rd_kafka_t *))                           \
    X(rd_kafka_resp_err_t, rd_kafka_error_code, (const rd_kafka_error_t *))                   \
    X(const char *, rd_kafka_error_string, (const rd_kafka_error_t *))                        \
    X(void, rd_kafka_error_destroy, (rd_kafka_error_t *))                                     \
    X(const char *, rd_kafka_topic_name, (const rd_kafka_topic_t *))

/* rd_kafka_seek_partitions (the newest of them) came with 1.6.0. */
#define RDKAFKA_MIN_VERSION 0x010600ff

#endif
