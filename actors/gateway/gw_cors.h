/* actors/gateway/gw_cors.h - CORS: which browser origins may call the API
 * (--allowed-origins: a comma-separated list of exact origins, or "*"; empty:
 * none, so browsers are refused). Pure: any thread. */
#ifndef MOON_ACTORS_GW_CORS_H
#define MOON_ACTORS_GW_CORS_H

/* 1 when origin (the request's Origin header, borrowed) is in allowed (the
 * option's value, borrowed; NULL or "": nothing is) or allowed is "*"; 0
 * otherwise (and for a NULL or empty origin). */
int moon_gw_cors_allowed(const char *allowed, const char *origin);

#endif /* MOON_ACTORS_GW_CORS_H */
