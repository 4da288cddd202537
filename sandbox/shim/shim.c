/*
 * rollhub-shim: the health endpoint AgentCore Runtime needs, for any container image.
 *
 *   GET  /ping         -> {"status":"Healthy"|"HealthyBusy","time_of_last_update":N}
 *   POST /invocations  <- {"action":"start"|"stop"|"status"[,"ttl":SECONDS]}
 *                      -> {"status":...,"busy":true|false,"time_of_last_update":N}
 *
 * "start" marks the session busy (HealthyBusy keeps AgentCore from reclaiming it), "stop"
 * clears it, "status" only reports. With "ttl", the busy flag clears itself after that many
 * seconds, so an abandoned sandbox goes idle and the platform's idle timeout reclaims it.
 * time_of_last_update is the Unix time of the last status change.
 *
 * Listens on 0.0.0.0:8080 unless --host/--port or ROLLHUB_SHIM_HOST/ROLLHUB_SHIM_PORT say
 * otherwise; port 0 picks a free port. It prints "listening on HOST:PORT" once bound.
 * One thread per connection, one request per connection (Connection: close).
 *
 * Build: cc -static -O2 -o rollhub-shim shim.c -lpthread
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEADER 16384
#define MAX_BODY 65536
#define MAX_CONNECTIONS 256
#define IO_TIMEOUT_S 5

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static int busy = 0;
static double busy_until = 0; /* Unix time, sub-second; 0: no ttl */
static long long last_update = 0;
static int active_connections = 0;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Current status; expires a ttl that has passed. Caller holds state_lock. */
static void refresh_locked(void) {
    if (busy && busy_until > 0 && now_s() >= busy_until) {
        busy = 0;
        last_update = (long long)busy_until;
        busy_until = 0;
    }
}

static int send_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static void respond(int fd, int code, const char *reason, const char *body) {
    char head[256];
    size_t blen = strlen(body);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     code, reason, blen);
    if (send_all(fd, head, (size_t)n) == 0) send_all(fd, body, blen);
}

static void respond_error(int fd, int code, const char *reason, const char *msg) {
    char body[256];
    snprintf(body, sizeof body, "{\"error\":\"%s\"}", msg);
    respond(fd, code, reason, body);
}

static void status_json(char *out, size_t size) {
    pthread_mutex_lock(&state_lock);
    refresh_locked();
    snprintf(out, size, "{\"status\":\"%s\",\"busy\":%s,\"time_of_last_update\":%lld}",
             busy ? "HealthyBusy" : "Healthy", busy ? "true" : "false", last_update);
    pthread_mutex_unlock(&state_lock);
}

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    return p;
}

/* Finds "key" : <value> at the top level of a flat JSON object; returns the value start. */
static const char *json_value(const char *body, const char *end, const char *key) {
    size_t klen = strlen(key);
    const char *p = body;
    while (p < end) {
        const char *q = memchr(p, '"', (size_t)(end - p));
        if (!q) return NULL;
        if ((size_t)(end - q) > klen + 1 && memcmp(q + 1, key, klen) == 0 && q[klen + 1] == '"') {
            const char *c = skip_ws(q + klen + 2, end);
            if (c < end && *c == ':') return skip_ws(c + 1, end);
        }
        p = q + 1;
    }
    return NULL;
}

static void handle_invocation(int fd, const char *body, size_t len) {
    const char *end = body + len;
    const char *p = skip_ws(body, end);
    const char *last = end;
    while (last > p && (last[-1] == ' ' || last[-1] == '\n' || last[-1] == '\r' || last[-1] == '\t'))
        last--;
    if (p >= end || *p != '{' || last[-1] != '}') {
        respond_error(fd, 400, "Bad Request", "body must be a JSON object");
        return;
    }
    const char *v = json_value(p, last, "action");
    if (!v || *v != '"') {
        respond_error(fd, 400, "Bad Request", "missing string field 'action'");
        return;
    }
    v++;
    const char *close = memchr(v, '"', (size_t)(last - v));
    if (!close) {
        respond_error(fd, 400, "Bad Request", "unterminated 'action'");
        return;
    }
    size_t alen = (size_t)(close - v);
    double ttl = 0;
    const char *t = json_value(p, last, "ttl");
    if (t) {
        char *tend;
        ttl = strtod(t, &tend);
        if (tend == t || !(ttl >= 0) || ttl > 1e9) {
            respond_error(fd, 400, "Bad Request", "'ttl' must be a number of seconds >= 0");
            return;
        }
    }
    long long now = (long long)time(NULL);
    pthread_mutex_lock(&state_lock);
    refresh_locked();
    if (alen == 5 && memcmp(v, "start", 5) == 0) {
        if (!busy) last_update = now;
        busy = 1;
        busy_until = ttl > 0 ? now_s() + ttl : 0;
    } else if (alen == 4 && memcmp(v, "stop", 4) == 0) {
        if (busy) last_update = now;
        busy = 0;
        busy_until = 0;
    } else if (!(alen == 6 && memcmp(v, "status", 6) == 0)) {
        pthread_mutex_unlock(&state_lock);
        respond_error(fd, 400, "Bad Request", "'action' must be start, stop or status");
        return;
    }
    pthread_mutex_unlock(&state_lock);
    char out[256];
    status_json(out, sizeof out);
    respond(fd, 200, "OK", out);
}

static void handle(int fd) {
    char *buf = malloc(MAX_HEADER + MAX_BODY + 1);
    if (!buf) return;
    size_t used = 0;
    char *header_end = NULL;
    while (!header_end) {
        if (used >= MAX_HEADER) {
            respond_error(fd, 431, "Request Header Fields Too Large", "headers too large");
            goto done;
        }
        ssize_t n = recv(fd, buf + used, MAX_HEADER - used, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) goto done;
        used += (size_t)n;
        buf[used] = '\0';
        header_end = strstr(buf, "\r\n\r\n");
    }
    char method[16], path[256], version[16];
    if (sscanf(buf, "%15s %255s %15s", method, path, version) != 3 ||
        strncmp(version, "HTTP/1.", 7) != 0) {
        respond_error(fd, 400, "Bad Request", "malformed request line");
        goto done;
    }
    char *q = strchr(path, '?');
    if (q) *q = '\0';
    long content_length = -1;
    for (char *line = strstr(buf, "\r\n"); line && line < header_end; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, "Content-Length:", 15) == 0) {
            char *e;
            content_length = strtol(line + 17, &e, 10);
            if (e == line + 17 || content_length < 0) {
                respond_error(fd, 400, "Bad Request", "bad Content-Length");
                goto done;
            }
        } else if (strncasecmp(line + 2, "Transfer-Encoding:", 18) == 0) {
            respond_error(fd, 411, "Length Required", "send a Content-Length body");
            goto done;
        }
    }
    if (strcmp(path, "/ping") == 0) {
        if (strcmp(method, "GET") != 0) {
            respond_error(fd, 405, "Method Not Allowed", "use GET /ping");
            goto done;
        }
        char out[256];
        status_json(out, sizeof out);
        /* /ping reports only the documented fields. */
        char *b = strstr(out, ",\"busy\"");
        char *tl = strstr(out, ",\"time_of_last_update\"");
        if (b && tl) memmove(b, tl, strlen(tl) + 1);
        respond(fd, 200, "OK", out);
        goto done;
    }
    if (strcmp(path, "/invocations") != 0) {
        respond_error(fd, 404, "Not Found", "routes: GET /ping, POST /invocations");
        goto done;
    }
    if (strcmp(method, "POST") != 0) {
        respond_error(fd, 405, "Method Not Allowed", "use POST /invocations");
        goto done;
    }
    if (content_length < 0) {
        respond_error(fd, 411, "Length Required", "Content-Length required");
        goto done;
    }
    if (content_length > MAX_BODY) {
        respond_error(fd, 413, "Payload Too Large", "body over 65536 bytes");
        goto done;
    }
    char *body = header_end + 4;
    size_t have = used - (size_t)(body - buf);
    while (have < (size_t)content_length) {
        ssize_t n = recv(fd, body + have, (size_t)content_length - have, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            respond_error(fd, 400, "Bad Request", "body shorter than Content-Length");
            goto done;
        }
        have += (size_t)n;
    }
    handle_invocation(fd, body, (size_t)content_length);
done:
    free(buf);
}

static void *connection_thread(void *arg) {
    int fd = (int)(long)arg;
    handle(fd);
    /* Lingering close: read what the client still sends (a body we refused), so closing
     * with unread data does not reset the connection before our reply arrives. */
    shutdown(fd, SHUT_WR);
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char sink[4096];
    size_t drained = 0;
    ssize_t n;
    while (drained < (1u << 20) && (n = recv(fd, sink, sizeof sink, 0)) > 0) drained += (size_t)n;
    close(fd);
    pthread_mutex_lock(&state_lock);
    active_connections--;
    pthread_mutex_unlock(&state_lock);
    return NULL;
}

static void on_term(int sig) {
    (void)sig;
    _exit(0);
}

int main(int argc, char **argv) {
    const char *host = getenv("ROLLHUB_SHIM_HOST");
    const char *port_s = getenv("ROLLHUB_SHIM_PORT");
    if (!host || !*host) host = "0.0.0.0";
    if (!port_s || !*port_s) port_s = "8080";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--host") == 0 && i + 1 < argc) host = argv[++i];
        else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) port_s = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--host ADDR] [--port N]\n", argv[0]);
            return 2;
        }
    }
    char *pend;
    long port = strtol(port_s, &pend, 10);
    if (*pend || port < 0 || port > 65535) {
        fprintf(stderr, "rollhub-shim: bad port %s\n", port_s);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    last_update = (long long)time(NULL);

    int srv = socket(AF_INET, SOCK_STREAM, 0);
    if (srv < 0) {
        perror("rollhub-shim: socket");
        return 1;
    }
    int one = 1;
    setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "rollhub-shim: bad IPv4 address %s\n", host);
        return 2;
    }
    if (bind(srv, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(srv, 128) < 0) {
        perror("rollhub-shim: bind/listen");
        return 1;
    }
    socklen_t alen = sizeof addr;
    getsockname(srv, (struct sockaddr *)&addr, &alen);
    printf("listening on %s:%d\n", host, ntohs(addr.sin_port));
    fflush(stdout);

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (;;) {
        int fd = accept(srv, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
                if (errno == EMFILE || errno == ENFILE) usleep(10000);
                continue;
            }
            perror("rollhub-shim: accept");
            return 1;
        }
        struct timeval tv = {IO_TIMEOUT_S, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        pthread_mutex_lock(&state_lock);
        int too_many = active_connections >= MAX_CONNECTIONS;
        if (!too_many) active_connections++;
        pthread_mutex_unlock(&state_lock);
        if (too_many) {
            respond_error(fd, 503, "Service Unavailable", "too many connections");
            close(fd);
            continue;
        }
        pthread_t th;
        if (pthread_create(&th, &attr, connection_thread, (void *)(long)fd) != 0) {
            respond_error(fd, 503, "Service Unavailable", "cannot start a thread");
            close(fd);
            pthread_mutex_lock(&state_lock);
            active_connections--;
            pthread_mutex_unlock(&state_lock);
        }
    }
}
