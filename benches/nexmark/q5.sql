-- Nexmark q5: hot items, the auctions with the most bids per sliding window (Flink's spelling)
CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
                    date_time TIMESTAMP, extra VARCHAR,
                    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE VIEW q5 AS
  SELECT ab.auction, ab.num, ab.starttime AS window_start, ab.endtime AS window_end FROM (
    SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime
    FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
    GROUP BY auction, window_start, window_end) AS ab
  JOIN (
    SELECT MAX(cb.num) AS maxn, cb.starttime, cb.endtime FROM (
      SELECT COUNT(*) AS num, window_start AS starttime, window_end AS endtime
      FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
      GROUP BY auction, window_start, window_end) AS cb
    GROUP BY cb.starttime, cb.endtime) AS mb
  ON ab.starttime = mb.starttime AND ab.endtime = mb.endtime AND ab.num >= mb.maxn;
