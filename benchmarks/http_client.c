/*
 * The HTTP suite's own client, for the two loads wrk cannot apply:
 *
 *   http_client idle  PORT N PATH        N keep-alive connections, one request each, then idle
 *   http_client count PORT CONNS TOTAL PATH
 *                                        exactly TOTAL requests over CONNS connections
 *
 * idle: opens N connections to 127.0.0.1:PORT (at most 64 connects or first requests in
 * flight: a server with a small listen backlog, cymongoose's, reset some of 10,000 connections
 * when 256 were), sends one GET PATH on each and reads its whole response,
 * so every connection is a keep-alive connection that has served a request, as a browser's
 * would be. Then it prints {"type": "idle", "open": ..., "failed": ..., ...} and holds the
 * connections until its stdin closes; then it checks each one (a server that closed it in
 * the meantime has left an EOF to read), prints {"type": "done", "still_open": ...} and exits.
 * The runner reads the server's RSS between the two lines.
 *
 * count: CONNS connections, each sending its next GET as soon as the previous response is
 * complete, until TOTAL requests have been answered; prints {"type": "done", "requests": ...,
 * "seconds": ..., "errors": ...}. A fixed count rather than a duration, so an instruction
 * count (callgrind) can be divided by it.
 *
 * Responses are read by Content-Length (every app of the suite sends one); a response
 * without it, a status other than 200, a reset or an EOF mid-response is an error. One
 * thread, epoll, no dependencies: built by the harness at each run like echo_client.c.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX 8192
#define CONNECTS_IN_FLIGHT 64

enum state { CONNECTING, READING_HEAD, READING_BODY, IDLE, DEAD };

struct conn {
    int fd;
    enum state st;
    size_t head_len;    /* bytes of the response head gathered so far */
    size_t body_left;   /* body bytes still to read */
    char head[HEAD_MAX];
};

static char request[1024];
static size_t request_len;
static char first_error[160];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void note_error(const char *what) {
    if (!first_error[0]) snprintf(first_error, sizeof first_error, "%s", what);
}

static int open_conn(int ep, struct conn *c, int port) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        note_error(strerror(errno));
        c->st = DEAD;
        return -1;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS) {
        note_error(strerror(errno));
        close(c->fd);
        c->st = DEAD;
        return -1;
    }
    c->st = CONNECTING;
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    return 0;
}

static int send_request(int ep, struct conn *c) {
    /* A request is far smaller than the socket buffer: one send takes it whole. */
    if (send(c->fd, request, request_len, MSG_NOSIGNAL) != (ssize_t)request_len) {
        note_error("send failed");
        return -1;
    }
    c->st = READING_HEAD;
    c->head_len = 0;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    return 0;
}

/* The head is complete in c->head[0..end): check the status, find the body length. */
static int parse_head(struct conn *c, size_t end) {
    if (end < 12 || strncmp(c->head, "HTTP/1.", 7) != 0 || strncmp(c->head + 9, "200", 3) != 0) {
        char msg[64];
        snprintf(msg, sizeof msg, "not a 200 response: %.24s", c->head);
        for (char *p = msg; *p; p++)
            if (*p == '\r' || *p == '\n' || *p == '"' || *p == '\\') *p = ' ';
        note_error(msg);
        return -1;
    }
    for (char *line = memchr(c->head, '\n', end); line && line < c->head + end; ) {
        line++;
        if (strncasecmp(line, "content-length:", 15) == 0) {
            c->body_left = strtoul(line + 15, NULL, 10);
            return 0;
        }
        line = memchr(line, '\n', c->head + end - line);
    }
    note_error("response without Content-Length");
    return -1;
}

/*
 * Read what the socket has. Returns 1 when a whole response has been read, 0 when more is
 * needed, -1 on an error or EOF. Bytes past the response would be a protocol error here
 * (one request in flight), so they are not kept.
 */
static int read_response(struct conn *c) {
    char scratch[65536];
    for (;;) {
        char *dst = c->st == READING_HEAD ? c->head + c->head_len : scratch;
        size_t room = c->st == READING_HEAD ? HEAD_MAX - c->head_len : sizeof scratch;
        if (c->st == READING_BODY && room > c->body_left) room = c->body_left;
        if (room == 0) {
            note_error("response head larger than 8 KiB");
            return -1;
        }
        ssize_t n = recv(c->fd, dst, room, 0);
        if (n < 0 && errno == EAGAIN) return 0;
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            note_error(n == 0 ? "server closed the connection mid-response" : strerror(errno));
            return -1;
        }
        if (c->st == READING_BODY) {
            c->body_left -= (size_t)n;
            if (c->body_left == 0) return 1;
            continue;
        }
        c->head_len += (size_t)n;
        char *end = memmem(c->head, c->head_len, "\r\n\r\n", 4);
        if (!end) continue;
        size_t head_end = (size_t)(end - c->head) + 4;
        if (parse_head(c, head_end) < 0) return -1;
        size_t extra = c->head_len - head_end;  /* body bytes that came with the head */
        if (extra > c->body_left) {
            note_error("more bytes than the response announced");
            return -1;
        }
        c->body_left -= extra;
        if (c->body_left == 0) return 1;
        c->st = READING_BODY;
    }
}

static void kill_conn(int ep, struct conn *c) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->st = DEAD;
}

/* Connected (or refused): returns 0 and sends the request, or -1. */
static int finish_connect(int ep, struct conn *c) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
        note_error(strerror(err));
        return -1;
    }
    return send_request(ep, c);
}

static int run_idle(int port, int n) {
    struct conn *conns = calloc((size_t)n, sizeof *conns);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int next = 0, pending = 0, open_ok = 0, failed = 0;
    double t0 = now();
    struct epoll_event evs[256];
    while (open_ok + failed < n) {
        while (next < n && pending < CONNECTS_IN_FLIGHT) {
            if (open_conn(ep, &conns[next++], port) < 0) failed++;
            else pending++;
        }
        int k = epoll_wait(ep, evs, 256, 10000);
        if (k == 0) {
            note_error("no progress for 10 s");
            break;
        }
        for (int i = 0; i < k; i++) {
            struct conn *c = evs[i].data.ptr;
            int r = c->st == CONNECTING ? (finish_connect(ep, c) < 0 ? -1 : 0) : read_response(c);
            if (r == 0) continue;
            pending--;
            if (r < 0) {
                kill_conn(ep, c);
                failed++;
                continue;
            }
            c->st = IDLE;
            open_ok++;
        }
    }
    double took = now() - t0;
    printf("{\"type\": \"idle\", \"open\": %d, \"failed\": %d, \"seconds\": %.3f, "
           "\"first_error\": \"%s\"}\n", open_ok, failed, took, first_error);
    fflush(stdout);
    char sink[256];
    while (read(0, sink, sizeof sink) > 0) {
    }
    int still = 0;
    for (int i = 0; i < n; i++) {
        if (conns[i].st != IDLE) continue;
        ssize_t r = recv(conns[i].fd, sink, sizeof sink, MSG_DONTWAIT | MSG_PEEK);
        if (r < 0 && errno == EAGAIN) still++;
    }
    printf("{\"type\": \"done\", \"still_open\": %d}\n", still);
    return 0;
}

static int run_count(int port, int nconns, long total) {
    struct conn *conns = calloc((size_t)nconns, sizeof *conns);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    long sent = 0, done = 0, errors = 0;
    int alive = 0;
    double t0 = now();
    for (int i = 0; i < nconns && i < total; i++) {
        if (open_conn(ep, &conns[i], port) == 0) {
            alive++;
            sent++;
        } else {
            errors++;
        }
    }
    struct epoll_event evs[256];
    while (done < total && alive > 0) {
        int k = epoll_wait(ep, evs, 256, 30000);
        if (k == 0) {
            note_error("no response for 30 s");
            break;
        }
        for (int i = 0; i < k; i++) {
            struct conn *c = evs[i].data.ptr;
            int r = c->st == CONNECTING ? (finish_connect(ep, c) < 0 ? -1 : 0) : read_response(c);
            if (r < 0) {
                kill_conn(ep, c);
                alive--;
                errors++;
                continue;
            }
            if (r == 0) continue;
            done++;
            if (sent < total) {
                sent++;
                if (send_request(ep, c) < 0) {
                    kill_conn(ep, c);
                    alive--;
                    errors++;
                }
            }
        }
    }
    printf("{\"type\": \"done\", \"requests\": %ld, \"seconds\": %.3f, \"errors\": %ld, "
           "\"first_error\": \"%s\"}\n", done, now() - t0, errors, first_error);
    return errors || done < total ? 1 : 0;
}

int main(int argc, char **argv) {
    int idle = argc == 5 && strcmp(argv[1], "idle") == 0;
    int count = argc == 6 && strcmp(argv[1], "count") == 0;
    if (!idle && !count) {
        fprintf(stderr, "usage: %s idle PORT N PATH | count PORT CONNS TOTAL PATH\n", argv[0]);
        return 2;
    }
    const char *path = argv[argc - 1];
    request_len = (size_t)snprintf(request, sizeof request,
                                   "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
    int port = atoi(argv[2]);
    return idle ? run_idle(port, atoi(argv[3])) : run_count(port, atoi(argv[3]), atol(argv[4]));
}
