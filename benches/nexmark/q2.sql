-- Nexmark q2: selection (the bids of some auctions)
CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
                    date_time TIMESTAMP, extra VARCHAR,
                    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE VIEW q2 AS
  SELECT window_start, window_end, auction, price
  FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) WHERE auction % 123 = 0;
