/*
 * The WebSocket suite's load generator (a Python client would be the bottleneck):
 *
 *   ws_client echo      PORT PATH CONNS SIZE SECONDS
 *   ws_client broadcast PORT PUB_PATH SUB_PATH SUBSCRIBERS SIZE SECONDS WINDOW
 *
 * echo: CONNS connections to ws://127.0.0.1:PORT/PATH; each sends one masked binary message
 * of SIZE bytes, waits for the whole echo (a binary message of SIZE bytes, in as many frames
 * as the server likes), and sends the next, for SECONDS. Prints {"type": "done",
 * "messages": ..., "seconds": ..., "errors": ..., "p50_us": ..., "p99_us": ...}: messages
 * echoed, and the round-trip latency of each.
 *
 * broadcast: SUBSCRIBERS connections on SUB_PATH that only read, and one publisher on
 * PUB_PATH that sends SIZE-byte binary messages (the first 8 bytes its sequence number)
 * which the server relays to every subscriber. The publisher keeps at most WINDOW messages
 * whose delivery is incomplete (not yet received by every subscriber), so the load is as
 * much as the server can fan out and no queue grows without bound. Prints "messages" (the
 * deliveries: messages received by subscribers), "published", and p50/p99 of the fan-out
 * time: from a message's send until its last subscriber has it.
 *
 * Both modes open every connection (blocking handshakes, one at a time), print
 * {"type": "connected"} and wait for a line on stdin before loading, so the runner can read
 * the server's CPU time after the handshakes; "client_cpu_s" in the result is the client's
 * own CPU over the loaded window (getrusage).
 *
 * Frames are masked with a fixed random key, computed once per message shape, so the client
 * does per message only what it must: copy bytes to the socket and parse frame headers.
 * Replies to pings; a close frame, an EOF, a reset or a message of the wrong size is an
 * error, counted, and the connection is dropped (the first error is printed). One thread,
 * epoll, no dependencies: built by the harness at each run like http_client.c.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK (256 * 1024)
#define RING 4096 /* broadcast: sequence numbers tracked in flight (>= WINDOW) */

struct conn {
    int fd;
    int dead;
    /* sending: the frame being written and how far */
    const unsigned char *out;
    size_t out_len, out_off;
    unsigned char pong[2 + 4 + 125];
    size_t pong_fill; /* bytes of the pong gathered while its ping's payload arrives */
    size_t pong_len;  /* bytes of a complete pong waiting to be written */
    /* receiving: the frame header being gathered, the payload still to skip */
    unsigned char hdr[14];
    size_t hdr_len, hdr_need;
    uint64_t payload_left;
    int opcode, fin;
    uint64_t msg_len;       /* bytes of the current message so far */
    unsigned char seq[8];   /* broadcast: the first bytes of the message */
    double sent_at;         /* echo: when the message in flight was sent */
};

static const unsigned char MASK[4] = {0x37, 0xfa, 0x21, 0x3d};
static char first_error[200];
static long errors;
static int epfd;
static size_t size;
static double *lat;  /* µs, one per message */
static size_t lat_n, lat_cap;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fail(struct conn *c, const char *what) {
    if (!first_error[0])
        snprintf(first_error, sizeof first_error, "%s", what);
    errors++;
    if (c && !c->dead) {
        c->dead = 1;
        close(c->fd);
    }
}

static void record(double us) {
    if (lat_n == lat_cap) {
        lat_cap = lat_cap ? lat_cap * 2 : 1 << 16;
        lat = realloc(lat, lat_cap * sizeof *lat);
        if (!lat) {
            perror("realloc");
            exit(2);
        }
    }
    lat[lat_n++] = us;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(double p) {
    if (!lat_n)
        return -1;
    size_t i = (size_t)(p * (lat_n - 1));
    return lat[i];
}

/* A client frame: FIN, opcode, mask bit, the length, the key, the masked payload. */
static size_t frame(unsigned char *out, int opcode, const unsigned char *payload, size_t n) {
    size_t h = 0;
    out[h++] = 0x80 | opcode;
    if (n < 126) {
        out[h++] = 0x80 | n;
    } else if (n < 65536) {
        out[h++] = 0x80 | 126;
        out[h++] = n >> 8;
        out[h++] = n & 0xff;
    } else {
        out[h++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--)
            out[h++] = (uint64_t)n >> (8 * i);
    }
    memcpy(out + h, MASK, 4);
    h += 4;
    for (size_t i = 0; i < n; i++)
        out[h + i] = payload[i] ^ MASK[i & 3];
    return h + n;
}

/* Connect and complete the opening handshake, blocking; then the socket is non-blocking. */
static int ws_connect(int port, const char *path, char *leftover, size_t *leftover_len) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        snprintf(first_error, sizeof first_error, "connect: %s", strerror(errno));
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char req[512];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     "Sec-WebSocket-Version: 13\r\n\r\n",
                     path, port);
    if (write(fd, req, n) != n) {
        snprintf(first_error, sizeof first_error, "handshake write: %s", strerror(errno));
        close(fd);
        return -1;
    }
    char head[4096];
    size_t got = 0;
    char *end = NULL;
    while (!end) {
        ssize_t r = read(fd, head + got, sizeof head - 1 - got);
        if (r <= 0) {
            snprintf(first_error, sizeof first_error, "handshake: %s",
                     r == 0 ? "EOF" : strerror(errno));
            close(fd);
            return -1;
        }
        got += r;
        head[got] = 0;
        end = strstr(head, "\r\n\r\n");
        if (!end && got == sizeof head - 1) {
            snprintf(first_error, sizeof first_error, "handshake: response head too long");
            close(fd);
            return -1;
        }
    }
    if (strncmp(head, "HTTP/1.1 101", 12) != 0) {
        char *eol = strstr(head, "\r\n");
        if (eol)
            *eol = 0;
        snprintf(first_error, sizeof first_error, "handshake answered: %.120s", head);
        close(fd);
        return -1;
    }
    *leftover_len = got - (end + 4 - head);
    memcpy(leftover, end + 4, *leftover_len);
    tv.tv_sec = 0;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

/* Write what is pending (the pong first); 0 when all is written, 1 when the socket is full. */
static int flush(struct conn *c) {
    while (c->pong_len) {
        ssize_t w = write(c->fd, c->pong, c->pong_len);
        if (w < 0 && errno == EAGAIN)
            return 1;
        if (w <= 0 || (size_t)w != c->pong_len) { /* 131 bytes go in one write or not at all */
            fail(c, "write (pong) failed");
            return 0;
        }
        c->pong_len = 0;
    }
    while (c->out && c->out_off < c->out_len) {
        ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (w < 0 && errno == EAGAIN)
            return 1;
        if (w <= 0) {
            char why[120];
            snprintf(why, sizeof why, "write: %s", w == 0 ? "0 bytes" : strerror(errno));
            fail(c, why);
            return 0;
        }
        c->out_off += w;
    }
    c->out = NULL;
    return 0;
}

static void want_write(struct conn *c, int on) {
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void send_frame(struct conn *c, const unsigned char *f, size_t n) {
    c->out = f;
    c->out_len = n;
    c->out_off = 0;
    if (flush(c) == 1)
        want_write(c, 1);
}

/*
 * Feed received bytes through the frame parser; on_message(c) is called for every complete
 * data message. Control payloads are short: a ping's is gathered into the pong.
 */
typedef void (*on_message_fn)(struct conn *c);

static void feed(struct conn *c, const unsigned char *p, size_t n, on_message_fn on_message) {
    while (n && !c->dead) {
        if (c->hdr_need == 0 || c->hdr_len < c->hdr_need) {
            if (c->hdr_need == 0)
                c->hdr_need = 2;
            c->hdr[c->hdr_len++] = *p++;
            n--;
            if (c->hdr_len == 2) {
                int len7 = c->hdr[1] & 0x7f;
                if (c->hdr[1] & 0x80) {
                    fail(c, "the server masked a frame");
                    return;
                }
                c->hdr_need = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0);
            }
            if (c->hdr_len < c->hdr_need)
                continue;
            int len7 = c->hdr[1] & 0x7f;
            uint64_t len = len7;
            if (len7 == 126)
                len = (uint64_t)c->hdr[2] << 8 | c->hdr[3];
            else if (len7 == 127)
                for (int i = 0; i < 8; i++)
                    len = len << 8 | c->hdr[2 + i];
            c->payload_left = len;
            c->fin = c->hdr[0] & 0x80;
            int op = c->hdr[0] & 0x0f;
            if (op == 0x8) {
                fail(c, "the server sent a close frame");
                return;
            }
            if (op == 0x9) { /* ping: answer with a pong carrying its payload */
                c->opcode = op;
                c->pong[0] = 0x8a;
                c->pong[1] = 0x80 | (unsigned char)len;
                memcpy(c->pong + 2, MASK, 4);
                c->pong_fill = 6;
            } else if (op == 0xa) {
                c->opcode = op;
            } else {
                if (op != 0 && c->msg_len) {
                    fail(c, "a new message began inside a fragmented one");
                    return;
                }
                if (op == 0x1 && !c->msg_len) {
                    fail(c, "the server sent a text message; binary expected");
                    return;
                }
                c->opcode = 0x2;
            }
        }
        size_t take = c->payload_left < n ? c->payload_left : n;
        if (c->opcode == 0x9) {
            for (size_t i = 0; i < take && c->pong_fill < sizeof c->pong; i++, c->pong_fill++)
                c->pong[c->pong_fill] = p[i] ^ MASK[(c->pong_fill - 6) & 3];
        } else if (c->opcode == 0x2) {
            for (size_t i = 0; i < take && c->msg_len + i < 8; i++)
                c->seq[c->msg_len + i] = p[i];
            c->msg_len += take;
        }
        p += take;
        n -= take;
        c->payload_left -= take;
        if (c->payload_left)
            continue;
        c->hdr_len = c->hdr_need = 0;
        if (c->opcode == 0x9) {
            c->pong_len = c->pong_fill;
            if (flush(c) == 1)
                want_write(c, 1);
        } else if (c->opcode == 0x2 && c->fin) {
            if (c->msg_len != size) {
                char why[120];
                snprintf(why, sizeof why, "a message of %llu bytes; %zu expected",
                         (unsigned long long)c->msg_len, size);
                fail(c, why);
                return;
            }
            c->msg_len = 0;
            on_message(c);
        }
    }
}

/* --------------------------------------------------------------------------- echo */

static unsigned char *echo_frame;
static size_t echo_frame_len;
static long echoed;

static void echo_message(struct conn *c) {
    double t = now();
    echoed++;
    record((t - c->sent_at) * 1e6);
    c->sent_at = t;
    send_frame(c, echo_frame, echo_frame_len);
}

/* --------------------------------------------------------------------------- broadcast */

static long delivered, published, fully_delivered;
static int subscribers;
static int ring_count[RING];
static double ring_sent[RING];

static void sub_message(struct conn *c) {
    uint64_t seq = 0;
    for (int i = 0; i < 8; i++)
        seq = seq << 8 | c->seq[i];
    delivered++;
    int slot = seq % RING;
    if (++ring_count[slot] == subscribers)
        record((now() - ring_sent[slot]) * 1e6);
    while (fully_delivered < published && ring_count[fully_delivered % RING] == subscribers) {
        ring_count[fully_delivered % RING] = 0;
        fully_delivered++;
    }
}

static void ignore_message(struct conn *c) { (void)c; }

static void loop(struct conn *conns, int n, double seconds, on_message_fn on_message,
                 struct conn *pub, unsigned char *pub_buf, long window) {
    static unsigned char buf[READ_CHUNK];
    struct epoll_event events[256];
    unsigned char payload[8 + 65536];
    memset(payload, 'x', sizeof payload);
    double deadline = now() + seconds;
    for (;;) {
        if (pub && !pub->dead && !pub->out) {
            /* the publisher: send while fewer than WINDOW messages are incompletely delivered */
            if (published - fully_delivered < window) {
                uint64_t seq = published;
                for (int i = 0; i < 8; i++)
                    payload[i] = seq >> (8 * (7 - i));
                size_t len = frame(pub_buf, 0x2, payload, size);
                ring_sent[seq % RING] = now();
                ring_count[seq % RING] = 0;
                published++;
                send_frame(pub, pub_buf, len);
                continue;
            }
        }
        double t = now();
        if (t >= deadline)
            break;
        int timeout_ms = (int)((deadline - t) * 1000) + 1;
        int k = epoll_wait(epfd, events, 256, timeout_ms > 100 ? 100 : timeout_ms);
        for (int i = 0; i < k; i++) {
            struct conn *c = events[i].data.ptr;
            if (c->dead)
                continue;
            if (events[i].events & EPOLLOUT) {
                if (flush(c) == 0 && !c->dead)
                    want_write(c, 0);
            }
            if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                for (;;) {
                    ssize_t r = read(c->fd, buf, sizeof buf);
                    if (r < 0 && errno == EAGAIN)
                        break;
                    if (r <= 0) {
                        char why[120];
                        snprintf(why, sizeof why, "read: %s", r == 0 ? "EOF" : strerror(errno));
                        fail(c, why);
                        break;
                    }
                    feed(c, buf, r, c == pub ? ignore_message : on_message);
                    if ((size_t)r < sizeof buf)
                        break;
                }
            }
        }
        int alive = 0;
        for (int i = 0; i < n && !alive; i++)
            alive = !conns[i].dead;
        if (!alive)
            break;
    }
}

/* The end of a run: a close frame (1000) on every connection with nothing half-written, so
 * the servers see a goodbye instead of a reset; their answers are not waited for. */
static void close_all(struct conn *conns, int n) {
    static const unsigned char bye[] = {0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8};
    for (int i = 0; i < n; i++) {
        if (conns[i].dead)
            continue;
        if (!conns[i].out && !conns[i].pong_len && write(conns[i].fd, bye, sizeof bye) < 0)
            errno = 0; /* a goodbye the server cannot take changes nothing measured */
        shutdown(conns[i].fd, SHUT_WR);
        close(conns[i].fd);
        conns[i].dead = 1;
    }
}

/* Connected: say so and wait for the runner's go (a line on stdin, or its EOF), so the
 * runner reads the server's CPU time after the handshakes and just before the load. */
static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void wait_for_go(void) {
    char go[16];
    printf("{\"type\": \"connected\"}\n");
    fflush(stdout);
    if (read(0, go, sizeof go) < 0)
        errno = 0; /* no runner on stdin: go at once */
}

static struct conn *open_conns(int port, const char *path, int n, on_message_fn on_message) {
    struct conn *conns = calloc(n, sizeof *conns);
    static char leftover[4096];
    for (int i = 0; i < n; i++) {
        size_t left = 0;
        conns[i].fd = ws_connect(port, path, leftover, &left);
        if (conns[i].fd < 0) {
            fprintf(stderr, "ws_client: connection %d of %d: %s\n", i + 1, n, first_error);
            printf("{\"type\": \"error\", \"error\": \"connection %d: %s\"}\n", i + 1, first_error);
            exit(1);
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &conns[i]};
        epoll_ctl(epfd, EPOLL_CTL_ADD, conns[i].fd, &ev);
        if (left)
            feed(&conns[i], (unsigned char *)leftover, left, on_message);
    }
    return conns;
}

int main(int argc, char **argv) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    epfd = epoll_create1(0);
    if (argc == 7 && strcmp(argv[1], "echo") == 0) {
        int port = atoi(argv[2]), n = atoi(argv[4]);
        size = strtoul(argv[5], NULL, 10);
        double seconds = atof(argv[6]);
        unsigned char *payload = malloc(size + 1);
        memset(payload, 'x', size);
        echo_frame = malloc(size + 14);
        echo_frame_len = frame(echo_frame, 0x2, payload, size);
        struct conn *conns = open_conns(port, argv[3], n, echo_message);
        wait_for_go();
        double cpu0 = cpu_seconds(), t0 = now();
        for (int i = 0; i < n; i++) {
            conns[i].sent_at = t0;
            send_frame(&conns[i], echo_frame, echo_frame_len);
        }
        loop(conns, n, seconds, echo_message, NULL, NULL, 0);
        double took = now() - t0, cpu = cpu_seconds() - cpu0;
        long counted = echoed;
        close_all(conns, n);
        qsort(lat, lat_n, sizeof *lat, cmp_double);
        printf("{\"type\": \"done\", \"messages\": %ld, \"seconds\": %.6f, \"errors\": %ld, "
               "\"p50_us\": %.1f, \"p99_us\": %.1f, \"client_cpu_s\": %.6f",
               counted, took, errors, percentile(0.50), percentile(0.99), cpu);
        if (first_error[0])
            printf(", \"first_error\": \"%s\"", first_error);
        printf("}\n");
        return 0;
    }
    if (argc == 9 && strcmp(argv[1], "broadcast") == 0) {
        int port = atoi(argv[2]);
        subscribers = atoi(argv[5]);
        size = strtoul(argv[6], NULL, 10);
        double seconds = atof(argv[7]);
        long window = atol(argv[8]);
        if (size < 8 || size > 65536 || window < 1 || window >= RING || subscribers < 1) {
            fprintf(stderr, "ws_client: broadcast needs 8 <= SIZE <= 65536, "
                            "1 <= WINDOW < %d, SUBSCRIBERS >= 1\n", RING);
            return 2;
        }
        struct conn *subs = open_conns(port, argv[4], subscribers, sub_message);
        struct conn *pub = open_conns(port, argv[3], 1, ignore_message);
        /* The server registers a subscriber when it accepts it; the 101 can reach us a
         * moment before the registration is done on some servers. */
        usleep(300 * 1000);
        unsigned char *pub_buf = malloc(size + 14);
        wait_for_go();
        double cpu0 = cpu_seconds(), t0 = now();
        loop(subs, subscribers, seconds, sub_message, pub, pub_buf, window);
        double took = now() - t0, cpu = cpu_seconds() - cpu0;
        close_all(pub, 1);
        close_all(subs, subscribers);
        qsort(lat, lat_n, sizeof *lat, cmp_double);
        printf("{\"type\": \"done\", \"messages\": %ld, \"published\": %ld, "
               "\"fully_delivered\": %ld, \"seconds\": %.6f, \"errors\": %ld, "
               "\"p50_us\": %.1f, \"p99_us\": %.1f, \"client_cpu_s\": %.6f",
               delivered, published, fully_delivered, took, errors, percentile(0.50),
               percentile(0.99), cpu);
        if (first_error[0])
            printf(", \"first_error\": \"%s\"", first_error);
        printf("}\n");
        return 0;
    }
    fprintf(stderr,
            "usage: ws_client echo PORT PATH CONNS SIZE SECONDS\n"
            "       ws_client broadcast PORT PUB_PATH SUB_PATH SUBSCRIBERS SIZE SECONDS WINDOW\n");
    return 2;
}
